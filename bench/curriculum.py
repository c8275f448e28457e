"""The pass-rate curriculum (``data.sampler=pass_rate``) against uniform sampling on the
quickstart task (2-digit addition, GRPO from a short SFT warm start): both samplers from the
same warm start per seed, with the same steps, settings and training pool.

    .venv/bin/python bench/curriculum.py [--seeds 0 1 2 3] [--steps 150] [--val-every 25]
                                         [--threshold 0.5] [--pool N] [--json PATH]

``--pool N`` trains on the first N training prompts only (default: all 7,400, which a run of
150 steps x 32 prompts mostly sees once; a small pool is seen many times, where a per-prompt
pass rate has something to go on). Prints, medians over seeds: held-out greedy accuracy at
each validation step, the share of zero-variance groups (all right or all wrong: no GRPO
signal) in the trained steps, overall and in the first and last third of the run, and the
steps until held-out accuracy first reaches ``--threshold`` (checked at validation steps; a
run that never does counts as later than every one that did), with how many seeds reached it.
"""

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ascent.quickstart.run import ACCURACY, prepare, rl_config
from ascent.trainer.rl.loop import train_rl
from quickstart_variants import metric_records

SAMPLERS = ("uniform", "pass_rate")


def restrict_pool(data: dict[str, str], pool: int | None) -> dict[str, str]:
    """The run's data with only the first ``pool`` training rows (None: all of them)."""
    if pool is None:
        return data
    path = Path(data["train"])
    kept = path.with_name(f"train_{pool}.jsonl")
    kept.write_text("".join(path.read_text().splitlines(keepends=True)[:pool]))
    return {**data, "train": str(kept)}


def figures(run_dir: Path, threshold: float) -> dict:
    """Held-out accuracy per validation step, zero-variance share per step (1 - the share of
    groups whose scores differ; the task's score is its 0/1 accuracy), steps to threshold."""
    records = metric_records(run_dir)
    accuracy = {r["step"]: r[ACCURACY] for r in records if ACCURACY in r}
    dead = [1 - r["signal/groups_with_spread"] for r in records if "signal/groups_with_spread" in r]
    third = max(1, len(dead) // 3)
    reached = [step for step, value in sorted(accuracy.items()) if value >= threshold]
    return {
        "accuracy": accuracy,
        "zero_variance": statistics.mean(dead),
        "zero_variance_first_third": statistics.mean(dead[:third]),
        "zero_variance_last_third": statistics.mean(dead[-third:]),
        "steps_to_threshold": reached[0] if reached else None,
    }


def run_all(args: argparse.Namespace, root: Path) -> list[dict]:
    rows = []
    for seed in args.seeds:
        out = root / f"seed_{seed}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        model_dir, data, _, _ = prepare(seed, out)
        data = restrict_pool(data, args.pool)
        for sampler in args.samplers:
            overrides = (
                f"data.sampler={sampler}",
                f"trainer.val_every={args.val_every}",
                "trainer.progress_bar=false",
                "trainer.export=false",
            )
            began = time.perf_counter()
            config = rl_config(model_dir, data, out / sampler, seed, args.steps, args.lr, overrides)
            train_rl(config)
            row = {"seed": seed, "sampler": sampler, "rl_seconds": time.perf_counter() - began}
            row |= figures(out / sampler / "rl", args.threshold)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summary_table(rows: list[dict], args: argparse.Namespace) -> dict[str, dict]:
    """Prints one row per sampler (medians over seeds); returns them."""
    steps = sorted({int(s) for r in rows for s in r["accuracy"]})
    summary = {}
    for sampler in args.samplers:
        mine = [r for r in rows if r["sampler"] == sampler]
        reached = [r["steps_to_threshold"] for r in mine]
        never = [math.inf if steps is None else steps for steps in reached]  # counted as last
        summary[sampler] = {
            "accuracy": {s: median([r["accuracy"].get(s) for r in mine]) for s in steps},
            "zero_variance": median([r["zero_variance"] for r in mine]),
            "zero_variance_first_third": median([r["zero_variance_first_third"] for r in mine]),
            "zero_variance_last_third": median([r["zero_variance_last_third"] for r in mine]),
            "steps_to_threshold": statistics.median(never),
            "reached": f"{sum(s is not None for s in reached)}/{len(mine)}",
            "rl_seconds": median([r["rl_seconds"] for r in mine]),
        }
    header = " | ".join(f"acc@{s}" for s in steps)
    print(
        f"| sampler | {header} | zero-var groups | first third | last third | "
        f"steps to {args.threshold:.0%} (reached) | RL s |"
    )
    print("| --- |" + " ---: |" * (len(steps) + 5))
    for sampler, s in summary.items():
        accuracy = " | ".join(f"{s['accuracy'][step]:.1%}" for step in steps)
        to = f"{s['steps_to_threshold']:.0f}"
        if math.isinf(s["steps_to_threshold"]):
            to = f"> {args.steps}"
        print(
            f"| {sampler} | {accuracy} | {s['zero_variance']:.1%} | "
            f"{s['zero_variance_first_third']:.1%} | {s['zero_variance_last_third']:.1%} | "
            f"{to} ({s['reached']}) | {s['rl_seconds']:.0f} |"
        )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=4e-4)
    parser.add_argument("--val-every", type=int, default=25)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--pool", type=int, default=None, help="Train on this many prompts.")
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--out", default=None, help="Keep the runs here (default: a temp dir).")
    parser.add_argument("--json", default=None, help="Also write the figures here.")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="ascent-curriculum-"))
    rows = run_all(args, root)
    pool = "all 7,400" if args.pool is None else str(args.pool)
    print(
        f"\nquickstart task, {args.steps} GRPO steps, training pool {pool} prompts, "
        f"seeds {args.seeds}; held-out greedy accuracy (medians over seeds)"
    )
    summary = summary_table(rows, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
