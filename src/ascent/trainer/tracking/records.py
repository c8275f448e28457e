"""The run directory's own records of the metrics: JSONL lines, and the console line."""

import json
import math
from pathlib import Path

from ascent.errors import InputError


def keep_records_up_to(path: Path, step: int) -> None:
    """Drop the JSONL records of steps after ``step`` (written by an attempt that did not
    reach its next checkpoint), atomically. A last line without its newline is the record a
    killed attempt was writing (each record and its newline go in one write): dropped if it
    is cut, else kept with its newline, so the resumed run's first record starts a line."""
    if not path.is_file():
        return
    lines = path.read_bytes().decode("utf-8", errors="replace").splitlines(keepends=True)
    kept = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) and not line.endswith("\n"):
                continue  # cut by the kill: the attempt's step is run again
            raise InputError(
                f"line {number} of {path} is not JSON ({error}); only a killed run's last "
                "line can be cut: fix or delete this one to resume"
            ) from None
        if record.get("step", 0) <= step:
            kept.append(line if line.endswith("\n") else line + "\n")
    if kept != lines:
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text("".join(kept))
        temporary.replace(path)


def console_line(step: int, metrics: dict[str, float]) -> str:
    """``step 12 | sft/loss 1.234 | sft/grad_norm 0.56 | ...`` with compact numbers."""
    return " | ".join([f"step {step}", *(f"{k} {_compact(v)}" for k, v in metrics.items())])


def _compact(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
        return f"{value:.2e}"
    return f"{value:.4g}"
