"""Generation beside training: trainer.mode sync, one_step_off and async on the same workload,
the rollout in one process and the trainer in another (separate placement over a local Ray,
one CPU core each), measured side by side in one run.

    .venv/bin/python bench/async.py [--steps 8 --warmup 2 --repeats 3] [--engine native]
                                    [--json PATH]

The workload: GRPO on a Qwen2-shaped model with random weights (hidden 128, 4 layers), 16
prompts x 4 samples of 64 tokens per step, the digit-share reward, no KL, lr 1e-6 (the policy
barely moves, so every mode generates the same lengths). Per mode and repeat, ``--warmup``
untimed steps, then ``--steps`` timed ones; figures are medians over all timed steps.

Columns: seconds per step; steps/s; generated tokens/s; the trainer's idle seconds per step
(waiting for rollouts: in sync the whole generation, ahead of training the wait for a step's
samples plus, in one_step_off, for the next step's before the weights change); the
generator's idle seconds per step (step time minus the time it had requests in flight); the
speed-up in steps/s over sync. The "fixed" modes are ``trainer.async_schedule=fixed``
(reproducible: each step generated as one batch, weights changed between batches only).
``--engine serve``: the rollout worker's generation runs in
an ``ascent serve`` process it starts (its one core; weights over HTTP from a safetensors
file).
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

# The reward, prompts and timed-run overrides are bench/step.py's (a reward module is loaded
# by its path in the workers, where bench/ is not importable, so the reward is named by path).
STEP = Path(__file__).resolve().with_name("step.py")
MODES = {
    "sync": ("trainer.mode=sync",),
    "one_step_off": ("trainer.mode=one_step_off",),
    "async k=1": ("trainer.mode=async", "trainer.max_staleness=1"),
    "async k=2": ("trainer.mode=async", "trainer.max_staleness=2"),
    # trainer.async_schedule=fixed: reproducible (weights change between whole batches only)
    "one_step_off fixed": ("trainer.mode=one_step_off", "trainer.async_schedule=fixed"),
    "async k=2 fixed": (
        "trainer.mode=async",
        "trainer.max_staleness=2",
        "trainer.async_schedule=fixed",
    ),
}
TRAINING = ("old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")


def run_mode(work: Path, mode: str, args: argparse.Namespace) -> list[dict]:
    """One run of ``mode``; per timed step: seconds, tokens, trainer and generator idle."""
    from ascent.config import load_config
    from ascent.trainer.rl.config import RLConfig
    from ascent.trainer.rl.loop import train_rl
    from step import TIMED_RUN

    run_dir = work / f"run-{time.time_ns()}"
    config = load_config(
        RLConfig,
        None,
        [
            f"model.path={work / 'model'}",
            f"data.train_files=[{work / 'prompts.jsonl'}]",
            f"data.prompts_per_step={args.prompts}",
            "data.chat_template=false",
            f"rollout.samples_per_prompt={args.samples}",
            f"rollout.max_response_length={args.response_length}",
            "algorithm.name=grpo",
            "algorithm.kl.mode=none",
            "actor.optim.lr=1e-6",
            f"reward.function={STEP}:digit_share",
            "reward.workers=0",
            "resources.backend=ray",
            "rollout.resources.backend=ray",
            f"trainer.run_dir={run_dir}",
            f"trainer.total_steps={args.warmup + args.steps}",
            *TIMED_RUN,
            f"rollout.engine={args.engine}",
            *MODES[mode],
        ],
    )
    train_rl(config)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = []
    for r in records[args.warmup :]:
        seconds = r["timing_s/step"]
        training = sum(r.get(f"timing_s/{stage}", 0.0) for stage in TRAINING)
        generating = r.get("async/generation_busy_s", r.get("timing_s/gen", 0.0))
        steps.append(
            {
                "seconds": seconds,
                "tokens": r["response_length/mean"] * args.prompts * args.samples,
                "trainer_idle": max(seconds - training, 0.0),
                "generator_idle": max(seconds - generating, 0.0),
            }
        )
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=64)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--engine", default="native", choices=["native", "serve", "vllm"])
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args()

    import ray

    from ascent.models import build_tiny_model
    from step import write_prompts

    work = Path(tempfile.mkdtemp(prefix="ascent-bench-async-"))
    build_tiny_model(work / "model", hidden_size=128, layers=4, intermediate_size=512, seed=0)
    write_prompts(work / "prompts.jsonl", 1024)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    steps: dict[str, list[dict]] = {mode: [] for mode in args.modes}
    try:
        for _ in range(args.repeats):  # interleaved, so drifts in machine load hit every mode
            for mode in args.modes:
                steps[mode] += run_mode(work, mode, args)
    finally:
        ray.shutdown()

    rows = {}
    for mode, measured in steps.items():
        seconds = statistics.median(s["seconds"] for s in measured)
        rows[mode] = {
            "seconds_per_step": seconds,
            "steps_per_s": 1 / seconds,
            "tokens_per_s": statistics.median(s["tokens"] / s["seconds"] for s in measured),
            "trainer_idle_s": statistics.median(s["trainer_idle"] for s in measured),
            "generator_idle_s": statistics.median(s["generator_idle"] for s in measured),
            "timed_steps": len(measured),
        }
    base = rows.get("sync", next(iter(rows.values())))["steps_per_s"]
    print(
        f"\n{args.prompts} prompts x {args.samples} samples x {args.response_length} tokens per "
        f"step; rollout ({args.engine}) and trainer in separate processes (1 core each); "
        f"medians of {args.repeats} x {args.steps} steps"
    )
    print(
        "| mode | s/step | steps/s | tokens/s | trainer idle s/step | generator idle s/step "
        "| speed-up |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode, row in rows.items():
        row["speedup"] = row["steps_per_s"] / base
        print(
            f"| {mode} | {row['seconds_per_step']:.3f} | {row['steps_per_s']:.2f} | "
            f"{row['tokens_per_s']:.0f} | {row['trainer_idle_s']:.3f} | "
            f"{row['generator_idle_s']:.3f} | {row['speedup']:.2f}x |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "modes": rows}, indent=1))


if __name__ == "__main__":
    main()
