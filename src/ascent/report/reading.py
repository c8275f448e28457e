"""A run directory read back for the report: its metrics per step, its sample generations and
its resolved config. Files only: nothing here imports the trainer, torch or a tracking tool,
so a report can be made on any machine that has the run directory.

The files and who writes them:

- ``metrics.jsonl``: one ``{"step": N, "<metric>": value, ...}`` object a line, from the
  ``jsonl`` tracking sink (``ascent.trainer.tracking.tracker.Tracker.log``);
- ``generations.jsonl``: sample generations of RL steps (``ascent.trainer.rl.records``);
- ``config.yaml``: the resolved config, saved when a run starts.

Both writers end a record with its newline in the same write, so a last line without one that
is not JSON is a record still being written, or one a killed run left half written: the report
leaves it out and says so (``Run.cut``), and the run's files are never changed. A line that is
not JSON anywhere else is refused, naming it.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ascent.errors import InputError, InputNotFound

METRICS = "metrics.jsonl"
GENERATIONS = "generations.jsonl"
CONFIG = "config.yaml"

Series = list[tuple[int, float]]  # (step, value) in step order


@dataclass(frozen=True)
class Run:
    """What the report shows of one run directory.

    series: every metric as (step, value) pairs; generations: the records of
    ``generations.jsonl`` (empty without that file); config: the resolved config (empty
    without ``config.yaml``) and config_text, the file as written (None without it); cut:
    the number of the cut last line by file name (``metrics.jsonl``), whose record is left
    out."""

    path: Path
    series: dict[str, Series]
    generations: list[dict[str, Any]]
    config: dict[str, Any]
    config_text: str | None
    cut: dict[str, int]

    @property
    def kind(self) -> str:
        """``rl`` for ``ascent train`` runs, ``supervised`` for ``ascent sft`` and ``rm``."""
        if "rollout" in self.config or any(key.startswith("actor/") for key in self.series):
            return "rl"
        return "supervised"

    @property
    def last_step(self) -> int:
        return max((points[-1][0] for points in self.series.values() if points), default=0)

    def setting(self, dotted: str, default: Any = None) -> Any:
        """A resolved config value by dotted name (``trainer.mode``), or ``default``."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def read_run(run_dir: str | Path) -> Run:
    """Read ``run_dir``; a path that is not a run directory, or a record that cannot be read,
    is an ``InputError`` naming the file (and line) and what to do."""
    path = Path(run_dir)
    metrics = path / METRICS
    if not path.exists():
        raise InputNotFound(f"{path} does not exist; give the run's trainer.run_dir")
    if not path.is_dir():
        raise InputError(f"{path} is a file; ascent report takes a run directory (trainer.run_dir)")
    if not metrics.is_file():
        raise InputNotFound(_no_metrics(path))
    cut: dict[str, int] = {}
    series = _series(metrics, _records(metrics, cut))
    if not series:
        raise InputError(
            f"{metrics} holds no metrics yet: the run has not logged a step. Run the report "
            "again after the run's first step"
        )
    generations = path / GENERATIONS
    config_file = path / CONFIG
    config_text = config_file.read_text() if config_file.is_file() else None
    return Run(
        path=path,
        series=series,
        generations=[r for _, r in _records(generations, cut)] if generations.is_file() else [],
        config=_config(config_file, config_text),
        config_text=config_text,
        cut=cut,
    )


def _no_metrics(path: Path) -> str:
    """The message for a directory without ``metrics.jsonl``; it names the run directories
    one level down (``ascent quickstart --out DIR`` keeps its RL run in ``DIR/rl``)."""
    inside = sorted(p.parent.name for p in path.glob(f"*/{METRICS}"))
    if inside:
        names = ", ".join(str(path / name) for name in inside)
        return f"{path} has no {METRICS}, but these run directories inside it do: {names}"
    return (
        f"{path} has no {METRICS}: it is not a run directory, or its run logged no metrics "
        "to it (tracking.sinks without jsonl). Give the run's trainer.run_dir"
    )


def _series(metrics: Path, records: list[tuple[int, dict[str, Any]]]) -> dict[str, Series]:
    """Every numeric field of the records, by metric name. A step recorded twice keeps its
    last value (the later line is the newer record)."""
    by_step: dict[str, dict[int, float]] = {}
    for number, record in records:
        step = record.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise InputError(
                f"line {number} of {metrics} has no integer 'step': {_clip(json.dumps(record))}. "
                "Every record of the jsonl sink has one; fix or delete that line"
            )
        for key, value in record.items():
            # Text fields are not curves; the tracker writes numbers only.
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool):
                by_step.setdefault(key, {})[step] = float(value)
    return {key: sorted(points.items()) for key, points in by_step.items()}


def _records(path: Path, cut: dict[str, int]) -> list[tuple[int, dict[str, Any]]]:
    """The JSON objects of a JSONL file with their line numbers (blank lines skipped). A cut
    last line (no newline, not JSON) is left out and its number put in ``cut`` under the
    file's name, for the page's notes."""
    records = []
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8"))
            except ValueError as error:  # JSONDecodeError, or UnicodeDecodeError
                if not line.endswith(b"\n"):
                    # The last line, as the file is now. Reading on would join it to what a
                    # writer still running appends next, so the file ends here.
                    cut[path.name] = number
                    break
                raise InputError(_not_json(path, number, line, error)) from None
            if not isinstance(record, dict):
                raise InputError(
                    f"line {number} of {path} is not a JSON object: {_clip(_text(line))}; delete it"
                )
            records.append((number, record))
    return records


def _not_json(path: Path, number: int, line: bytes, error: ValueError) -> str:
    reason = error.msg if isinstance(error, json.JSONDecodeError) else "not UTF-8"
    return (
        f"line {number} of {path} is not JSON ({reason}): {_clip(_text(line))}. Only a run's "
        "last line can be cut (a run killed or still writing); fix or delete this one"
    )


def _text(line: bytes) -> str:
    return line.decode("utf-8", errors="replace")


def _config(path: Path, text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InputError(f"{path} is not valid YAML ({error}); restore the run's config") from None
    return config if isinstance(config, dict) else {}


def _clip(text: str, limit: int = 120) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def finite(points: Series) -> Series:
    """The points whose value is a number (NaN and infinities are logged, not plottable)."""
    return [(step, value) for step, value in points if math.isfinite(value)]
