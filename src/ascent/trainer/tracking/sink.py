"""What every tracking sink is given, and what it does.

A sink opens in ``__init__`` from a ``SinkContext``, then takes ``log(metrics, step)`` (the
step's scalars), ``log_samples(rows, step)`` (sample generations: dicts with the same keys,
as a table where the tool has one) and ``close()``; ``run_id()`` is what a resumed run
reopens it with (None when the tool cannot resume). Any of them may raise. Opening must fail
in seconds, never prompt and never wait minutes, since the ``Tracker`` stops the run when a
sink cannot start; its class's ``fix`` says what the user does then. Later failures the
``Tracker`` reports once, and turns that sink off.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ascent.trainer.tracking.config import TrackingConfig


@dataclass(frozen=True)
class SinkContext:
    run_dir: Path
    settings: TrackingConfig
    run_name: str
    run_config: dict | None  # the resolved config, logged as the run's parameters
    resume_step: int | None  # the checkpoint's step when the run resumes (see Tracker)
    run_id: str | None  # this sink's run id kept in that checkpoint


class MetricSink(Protocol):
    name: str
    fix: str  # what to do when it cannot start, for the message that stops the run

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def log_samples(self, rows: list[dict], step: int) -> None: ...

    def run_id(self) -> str | None: ...

    def close(self) -> None: ...


def optional(module: str) -> Any:
    """Import a tool's package, or an ImportError that says how to install it."""
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(
            f"tracking sink {module!r} is selected but {module} is not installed; "
            f"pip install 'ascent[tracking]' (or {module}), or remove it from tracking.sinks"
        ) from None


def flatten(tree: dict, prefix: str = "") -> dict[str, str]:
    """A nested config as dotted keys with string values (tools' flat parameters)."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat |= flatten(value, name + ".")
        else:
            flat[name] = str(value)
    return flat


def markdown_table(rows: list[dict]) -> str:
    """Rows as a Markdown table (for tools whose tables are text)."""
    columns = list(rows[0]) if rows else []

    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", "<br>")

    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(cell(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)
