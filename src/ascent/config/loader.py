"""YAML + dotted overrides -> a validated pydantic config, with errors that say what to do."""

import difflib
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ascent.errors import InputError

M = TypeVar("M", bound=BaseModel)


class ConfigError(InputError):
    """A config that cannot be used; the message names the key and what would be valid."""


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=[x, y]"]`` -> nested dict; values are parsed as YAML (numbers, bools,
    lists, null), so ``lr=3e-4`` is a float and ``name=ppo`` a string."""
    tree: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not of the form key.path=value")
        node = tree
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} goes inside {part!r}, which is a value")
        node[parts[-1]] = _value(raw)
    return tree


SCIENTIFIC = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def _value(raw: str) -> Any:
    """YAML's reading of ``raw``, except that ``3e-4`` is a number (YAML 1.1 wants ``3.0e-4``)."""
    if not raw.strip():
        return ""
    value = yaml.safe_load(raw)
    if isinstance(value, str) and SCIENTIFIC.match(value.strip()):
        return float(value)
    return value


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(model: type[M], path: str | Path | None, overrides: list[str] | None = None) -> M:
    """Read ``path`` (YAML; None for defaults only), apply ``overrides``, validate."""
    data: dict[str, Any] = {}
    if path is not None:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file {str(path)!r} does not exist")
        try:
            data = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {str(path)!r} is not valid YAML: {error}") from error
        if not isinstance(data, dict):
            raise ConfigError(f"config file {str(path)!r} must hold a mapping at the top level")
    data = _merge(data, parse_overrides(overrides or []))
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_explain(model, error)) from None


def dump_config(config: BaseModel, path: str | Path) -> None:
    """Write the resolved config (every field, defaults included) as YAML."""
    Path(path).write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))


def _explain(model: type[BaseModel], error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        location = [str(part) for part in problem["loc"]]
        key = ".".join(location)
        if problem["type"] == "extra_forbidden":
            lines.append(f"unknown key {key!r}{_suggestion(model, location)}")
        elif problem["type"] == "missing":
            lines.append(f"missing required key {key!r}")
        else:
            lines.append(f"{key}: {problem['msg']} (got {problem.get('input')!r})")
    return "invalid config:\n  " + "\n  ".join(lines)


# Keys that moved (their last part -> where they live now, relative to the role).
MOVED = {
    "sequence_parallel": "parallel.sequence",
    "expert_parallel": "parallel.expert (a section of the role, beside fsdp)",
}


def _suggestion(model: type[BaseModel], location: list[str]) -> str:
    """'; did you mean ...' with the nearest field names at that level of the tree (or where
    a moved key lives now)."""
    if location[-1] in MOVED:
        return f"; it moved to {MOVED[location[-1]]}"
    node: Any = model
    for part in location[:-1]:
        field = getattr(node, "model_fields", {}).get(part)
        if field is None:
            return ""
        node = _model_of(field.annotation)
        if node is None:
            return ""
    names = list(getattr(node, "model_fields", {}))
    close = difflib.get_close_matches(location[-1], names, n=2, cutoff=0.6)
    prefix = ".".join(location[:-1])
    options = [f"{prefix}.{name}" if prefix else name for name in close]
    if options:
        return "; did you mean " + " or ".join(repr(o) for o in options) + "?"
    return f"; valid keys here: {', '.join(names)}"


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (``X``, ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None
