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
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ascent.quickstart.run import ACCURACY, prepare, rl_config
from ascent.trainer.rl.loop import train_rl

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
    rows = []
    for seed in args.seeds:
        out = root / f"seed_{seed}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        model_dir, data, _, _ = prepare(seed, out)
        for mode in args.modes:
            run_out = out / mode.replace(" ", "_").replace("=", "")
            overrides = (
                *MODES[mode],
                f"rollout.engine={args.engine}",
                "trainer.progress_bar=false",
                "trainer.export=false",
            )
            began = time.perf_counter()
            result = train_rl(
                rl_config(model_dir, data, run_out, seed, args.steps, 4e-4, overrides)
            )
            seconds = time.perf_counter() - began
            before, after = (
                result["validation"][0][1][ACCURACY],
                result["validation"][-1][1][ACCURACY],
            )
            rows.append(
                {
                    "seed": seed,
                    "mode": mode,
                    "before": before,
                    "after": after,
                    "gain_points": 100 * (after - before),
                    "rl_seconds": seconds,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    summary = {}
    for mode in args.modes:
        gains = [r["gain_points"] for r in rows if r["mode"] == mode]
        summary[mode] = {"mean_gain": statistics.mean(gains), "min_gain": min(gains)}
    sync = summary.get("sync", {}).get("mean_gain")
    print(
        f"\nquickstart task, {args.steps} GRPO steps, rollout.engine={args.engine}; "
        "held-out gain in points"
    )
    print("| mode | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean | vs sync |")
    print("| --- |" + " ---: |" * (len(args.seeds) + 2))
    for mode in args.modes:
        gains = [f"{r['gain_points']:+.1f}" for r in rows if r["mode"] == mode]
        mean = summary[mode]["mean_gain"]
        versus = f"{mean - sync:+.1f}" if sync is not None else "-"
        print(f"| {mode} | " + " | ".join(gains) + f" | {mean:+.1f} | {versus} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
