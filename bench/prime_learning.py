"""PRIME against GRPO on the quickstart task (2-digit addition, from a short SFT warm start):
both from the same warm start per seed, the same steps, prompts, samples and actor settings,
in one run. PRIME adds the implicit PRM (the warm start's copy, trained each step on the
outcome labels) and its dense token rewards.

    .venv/bin/python bench/prime_learning.py [--seeds 0 1 2 3] [--steps 150] [--json PATH]

Prints held-out greedy accuracy gain per seed and variant (GRPO, GRPO with the prompt filter
of PRIME's preset, PRIME), and, for PRIME, whether the process rewards carry signal, as means
over steps: the PRM's accuracy on responses it has not learned from (the sign of the summed
implicit reward against the label, before its step), the pairwise accuracy within groups
(the share of right-wrong pairs to one prompt whose right answer has the larger summed
reward, as the advantage sees it), the spread of the token rewards, and the gap between the
mean summed rewards of right and wrong answers.
"""

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from quickstart_variants import gain_table, metric_records, run_variants

VARIANTS = {
    "grpo": ("algorithm.name=grpo",),
    # GRPO with the prompt filter PRIME's preset has: what the filter alone is worth
    "grpo + filter": ("algorithm.name=grpo", "algorithm.dynamic_sampling=true"),
    "prime": ("algorithm.name=prime",),
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
        "pairwise_accuracy": statistics.mean(
            r["prime/pairwise_accuracy"] for r in records if "prime/pairwise_accuracy" in r
        ),
        "steps_with_both": len(gaps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--beta", type=float, default=0.05, help="implicit_prm.beta")
    parser.add_argument("--prm-lr", type=float, default=1.5e-5, help="implicit_prm.optim.lr")
    parser.add_argument("--out", default=None, help="Keep the runs here (default: a temp dir).")
    parser.add_argument("--json", default=None, help="Also write the figures here.")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="ascent-prime-learning-"))
    variants = dict(VARIANTS)
    variants["prime"] = (
        *variants["prime"],
        f"implicit_prm.beta={args.beta}",
        f"implicit_prm.optim.lr={args.prm_lr}",
    )
    rows = run_variants(variants, args.seeds, args.steps, root, extra=process_reward_figures)
    print(f"\nquickstart task, {args.steps} steps; held-out gain in points")
    summary = gain_table(rows, args.seeds, reference="grpo")
    prime_rows = [r for r in rows if r["variant"] == "prime"]
    print("\nPRIME's process rewards, per seed (means over steps)")
    print(
        "| seed | PRM accuracy (unseen) | pairwise accuracy in groups | token reward std | "
        "correct - incorrect (summed) |"
    )
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in prime_rows:
        print(
            f"| {r['seed']} | {r['prm_accuracy']:.3f} | {r['pairwise_accuracy']:.3f} | "
            f"{r['token_reward_std']:.4f} | {r['correct_minus_incorrect']:+.4f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
