"""Does generating ahead of training cost learning? The quickstart task (2-digit addition,
GRPO from a short SFT warm start) trained with trainer.mode sync, one_step_off and async at
max_staleness 1 and 4, from the same warm start per seed, same steps and settings, in one run.

    .venv/bin/python bench/async_learning.py [--seeds 0 1 2 3] [--steps 150] [--engine native]
                                             [--json PATH]

Prints held-out greedy accuracy before and after RL per seed and mode, the gain in points,
each mode's mean gain and its difference from sync's, and each run's RL seconds. A learning
claim, not a timing one (this is one process: generation and training share its threads;
``bench/async.py`` measures speed with separate processes).
"""

import argparse
import json
import tempfile
from pathlib import Path

from quickstart_variants import gain_table, run_variants

MODES = {
    "sync": ("trainer.mode=sync",),
    "one_step_off": ("trainer.mode=one_step_off",),
    "async k=1": ("trainer.mode=async", "trainer.max_staleness=1"),
    "async k=4": ("trainer.mode=async", "trainer.max_staleness=4"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--engine", default="native", choices=["native", "serve", "vllm"])
    parser.add_argument("--out", default=None, help="Keep the runs here (default: a temp dir).")
    parser.add_argument("--json", default=None, help="Also write the figures here.")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="ascent-async-learning-"))
    variants = {mode: (*MODES[mode], f"rollout.engine={args.engine}") for mode in args.modes}
    rows = run_variants(variants, args.seeds, args.steps, root)
    print(
        f"\nquickstart task, {args.steps} GRPO steps, rollout.engine={args.engine}; "
        "held-out gain in points"
    )
    summary = gain_table(rows, args.seeds, reference="sync")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
