"""On-policy distillation against RL on the reward alone: the distillation quickstart
(``ascent quickstart --task distill``) over several seeds. Per seed, the addition task's SFT
warm start, its GRPO teacher (400 steps), then two students from the same warm start for the
same steps: GRPO on the reward, and the teacher's terms alone (``teacher.task_advantage=0``).

    .venv/bin/python bench/distill.py [--seeds 0 1 2] [--steps 100] [--json PATH]

Prints held-out greedy accuracy of both students at every validation, per seed, and the
medians over seeds, and the first step at which each reached the accuracy GRPO ends with
(GRPO's is its last step, or earlier if it got there before).
A learning claim (in steps), not a timing one; each run's seconds are in the JSON.
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from ascent.quickstart.distill_run import STEPS, first_step_at, run_distill_quickstart


def curves(summary: dict, name: str) -> dict[int, float]:
    return {step: value for step, value in summary[name]["held_out_accuracy"]}


def print_table(summaries: list[dict]) -> dict:
    """Per seed and median: accuracy by step for both students, and the first step at the
    accuracy GRPO ends with."""
    steps = sorted(curves(summaries[0], "grpo"))
    header = f"{'seed':>5} {'teacher':>8} {'student':>8} " + " ".join(f"{s:>6}" for s in steps)
    print(header + f" {'to GRPO end':>11}")
    rows = {}
    for summary in summaries:
        teacher = summary["teacher"]["accuracy_after"]
        target = summary["grpo"]["accuracy_after"]
        for name in ("grpo", "distill"):
            curve = curves(summary, name)
            reached = first_step_at(summary[name]["held_out_accuracy"], target)
            rows.setdefault(name, []).append((curve, reached))
            cells = " ".join(f"{100 * curve[s]:>6.1f}" for s in steps)
            print(f"{summary['seed']:>5} {100 * teacher:>8.1f} {name:>8} {cells} {reached!s:>11}")
    medians = {}
    for name, runs in rows.items():
        by_step = {s: statistics.median(c[s] for c, _ in runs) for s in steps}
        reached = [r for _, r in runs if r is not None]
        medians[name] = {"accuracy": by_step, "reached_grpo_end": [r for _, r in runs]}
        cells = " ".join(f"{100 * by_step[s]:>6.1f}" for s in steps)
        median_reach = statistics.median(reached) if len(reached) == len(runs) else None
        print(f"{'med':>5} {'':>8} {name:>8} {cells} {median_reach!s:>11}")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", default=None, help="Keep the runs here (default: a temp dir).")
    parser.add_argument("--json", default=None, help="Also write the figures here.")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="ascent-distill-"))
    summaries = []
    for seed in args.seeds:
        out = root / f"seed_{seed}"
        run_distill_quickstart(seed=seed, out_dir=str(out), steps=args.steps)
        summaries.append(json.loads((out / "summary.json").read_text()))
    print(
        f"\naddition task, {args.steps} steps from the SFT warm start; held-out accuracy (%) "
        "by step, and the first step at GRPO's final accuracy"
    )
    medians = print_table(summaries)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": summaries, "medians": medians}, indent=1))


if __name__ == "__main__":
    main()
