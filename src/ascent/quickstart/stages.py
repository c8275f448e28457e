"""The stages every warm-started quickstart shares (addition, tools, vision), each said once:
announce the SFT warm start, write the RL rows of each split, read what RL did to held-out
accuracy, and keep the summary."""

import json
from collections.abc import Callable
from pathlib import Path


def announce_warm_start(warm: dict, measure: str, note: str = "") -> None:
    """One line: the warm start's steps (and attempt, when it restarted), ``measure`` on the
    development problems, and its seconds."""
    restarted = f" (attempt {warm['attempts']})" if warm.get("attempts", 1) > 1 else ""
    print(
        f"SFT warm start{note}: {warm['steps']} steps{restarted}, {measure} "
        f"{warm['dev_accuracy']:.0%} ({warm['seconds']:.0f} s)"
    )


def write_splits(
    out: Path, write_rows: Callable[[Path, list], str], splits: dict[str, list], suffix: str
) -> dict[str, str]:
    """Each split's RL rows in ``out/data/<split><suffix>`` (``write_rows`` of the task);
    returns the files by split."""
    data_dir = out / "data"
    data_dir.mkdir()
    return {name: write_rows(data_dir / f"{name}{suffix}", rows) for name, rows in splits.items()}


def held_out_change(history: list, *keys: str) -> dict:
    """Held-out accuracy (``keys[0]``) before and after RL, its gain in points, and each
    validation's ``keys`` by step, from ``train_rl``'s validation history."""
    first, last = history[0][1], history[-1][1]
    accuracy = keys[0]
    return {
        "accuracy_before": first[accuracy],
        "accuracy_after": last[accuracy],
        "gain_points": 100 * (last[accuracy] - first[accuracy]),
        "held_out_accuracy": [(step, *(m[k] for k in keys)) for step, m in history],
    }


def keep_summary(summary: dict, out: Path) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
