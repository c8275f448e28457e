"""Every config field is read somewhere: a documented field that no code reads is a setting
that silently does nothing (``algorithm.overlong_penalty`` was one).

The check is static, over the source of ``ascent``: a field counts as read when its name
appears as an attribute (``x.field``) or in ``getattr(x, "field")``. A name read on another
object also counts, so this catches fields that no code mentions, not every misuse; the
tests of each feature show that the fields they cover change behaviour. A field that is
deliberately never read as an attribute goes in ``NOT_READ_AS_ATTRIBUTES`` with the reason.
"""

import ast
import importlib
import pkgutil
from pathlib import Path

import ascent
from ascent.engine.config import Strict

SOURCE = Path(ascent.__file__).parent

# (class name, field): why no code reads it as an attribute. Empty today; keep it honest.
NOT_READ_AS_ATTRIBUTES: dict[tuple[str, str], str] = {}


def every_config_class() -> list[type[Strict]]:
    for module in pkgutil.walk_packages([str(SOURCE)], "ascent."):
        if not module.name.endswith("__main__"):  # running it parses the command line
            importlib.import_module(module.name)
    found, todo = set(), [Strict]
    while todo:
        for subclass in todo.pop().__subclasses__():
            if subclass not in found:
                found.add(subclass)
                todo.append(subclass)
    return sorted(found, key=lambda c: (c.__module__, c.__name__))


def names_read_in_source() -> set[str]:
    names = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
            ):
                names.add(node.args[1].value)
    return names


def test_every_config_field_is_read_somewhere():
    classes = every_config_class()
    # The trees of both commands and of every worker are in it.
    names = {c.__name__ for c in classes}
    assert {"RLConfig", "SFTConfig", "ActorConfig", "RolloutConfig", "RewardConfig"} <= names
    read = names_read_in_source()
    unread = [
        f"{c.__module__}.{c.__name__}.{field}"
        for c in classes
        for field in c.model_fields
        if field not in read and (c.__name__, field) not in NOT_READ_AS_ATTRIBUTES
    ]
    assert not unread, f"config fields no code reads: {unread}"
