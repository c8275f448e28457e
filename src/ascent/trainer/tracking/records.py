"""The run directory's own records of the metrics: JSONL lines, and the console line."""

import json
import math
from pathlib import Path


def keep_records_up_to(path: Path, step: int) -> None:
    """Drop the JSONL records of steps after ``step`` (written by an attempt that did not
    reach its next checkpoint), atomically."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line).get("step", 0) <= step]
    if len(kept) != len(lines):
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
