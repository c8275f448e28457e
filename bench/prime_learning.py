"""PRIME against GRPO on the quickstart task (2-digit addition, from a short SFT warm start):
both from the same warm start per seed, the same steps, prompts, samples and actor settings,
in one run. PRIME adds the implicit PRM (the warm start's copy, trained each step on the
outcome labels) and its dense token rewards.

    .venv/bin/python bench/prime_learning.py [--seeds 0 1 2 3] [--steps 150] [--json PATH]

Prints held-out greedy accuracy gain per seed and algorithm, and, for PRIME, what shows the
process rewards carry signal: the PRM's accuracy (share of responses whose summed implicit
reward has the sign of their label, measured on the step's batch), the spread of the token
rewards, and the gap between the mean summed reward of correct and incorrect responses
(averaged over the steps that had both).
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from quickstart_variants import gain_table, metric_records, run_variants

VARIANTS = {
    "grpo": ("algorithm.name=grpo",),
    "prime": ("algorithm.name=prime", "implicit_prm.optim.lr=4e-4"),
}


def process_reward_figures(run_dir: Path) -> dict:
    records = metric_records(run_dir)
    if not any("prm/accuracy" in r for r in records):
        return {}
    gaps = [
        r["prime/sequence_reward/correct"] - r["prime/sequence_reward/incorrect"]
        for r in records
        if "prime/sequence_reward/correct" in r and "prime/sequence_reward/incorrect" in r
    ]
    return {
        "prm_accuracy": statistics.mean(r["prm/accuracy"] for r in records if "prm/accuracy" in r),
        "token_reward_std": statistics.mean(
            r["prime/token_reward/std"] for r in records if "prime/token_reward/std" in r
        ),
        "correct_minus_incorrect": statistics.mean(gaps) if gaps else float("nan"),
        "steps_with_both": len(gaps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--beta", type=float, default=0.05, help="implicit_prm.beta")
    parser.add_argument("--out", default=None, help="Keep the runs here (default: a temp dir).")
    parser.add_argument("--json", default=None, help="Also write the figures here.")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="ascent-prime-learning-"))
    variants = dict(VARIANTS)
    variants["prime"] = (*variants["prime"], f"implicit_prm.beta={args.beta}")
    rows = run_variants(variants, args.seeds, args.steps, root, extra=process_reward_figures)
    print(f"\nquickstart task, {args.steps} steps; held-out gain in points")
    summary = gain_table(rows, args.seeds, reference="grpo")
    prime_rows = [r for r in rows if r["variant"] == "prime"]
    print("\nPRIME's process rewards, per seed (means over steps)")
    print("| seed | PRM accuracy | token reward std | correct - incorrect (summed) |")
    print("| ---: | ---: | ---: | ---: |")
    for r in prime_rows:
        print(
            f"| {r['seed']} | {r['prm_accuracy']:.2f} | {r['token_reward_std']:.4f} | "
            f"{r['correct_minus_incorrect']:+.3f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
