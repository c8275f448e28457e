"""Run directories for the report's tests, written by the trainer's own writers: metrics through
the ``Tracker``'s jsonl sink, the resolved config through ``dump_config``. Generations are
written in ``StepRecords``' format directly (it needs a batch and a tokenizer)."""

import json

from ascent.config import dump_config, load_config
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.tracking import Tracker, TrackingConfig

STEPS = 6

# One step of an async agent run with a critic, a KL loss and a teacher: a metric of every
# panel.
EVERY_METRIC = {
    "critic/score/mean": 0.4,
    "critic/rewards/mean": 0.35,
    "critic/acc/mean": 0.4,
    "critic/values/mean": 0.3,
    "critic/returns/mean": 0.35,
    "critic/vf_loss": 0.2,
    "critic/vf_clipfrac": 0.05,
    "critic/grad_norm": 0.8,
    "actor/pg_loss": -0.01,
    "actor/kl_loss": 0.002,
    "actor/ppo_kl": 0.001,
    "actor/entropy": 0.9,
    "actor/grad_norm": 1.2,
    "actor/pg_clipfrac": 0.1,
    "rollout/mismatch_kl": 1e-6,
    "response_length/mean": 12.0,
    "response_length/min": 4.0,
    "response_length/max": 16.0,
    "response_length/clip_ratio": 0.2,
    "timing_s/gen": 1.0,
    "timing_s/update_actor": 2.0,
    "timing_s/step": 3.5,
    "async/staleness_mean": 0.5,
    "async/staleness_max": 1.0,
    "async/mixed_version_frac": 0.1,
    "agent/turns/mean": 2.5,
    "agent/tool_calls/mean": 1.5,
    "agent/tool_errors/mean": 0.1,
    "agent/used_tools": 0.8,
    "agent/tool_error_rate": 0.05,
    "agent/end/answer": 0.9,
    "distill/reverse_kl": 0.8,
    "distill/agreement": 0.3,
    "actor/distill_forward_kl_top_k": 1.1,
}

# Validation with 4 sampled answers per prompt (trainer.val_samples_per_prompt=4).
SAMPLED_VALIDATION = {
    "val/digits/acc": 0.3,
    "val/digits/score": 0.35,
    "val/digits/mean@1": 0.3,
    "val/digits/pass@1": 0.3,
    "val/digits/pass@4": 0.6,
    "val/digits/maj@4": 0.35,
    "val/pass@4": 0.6,
}


def rl_config(run_dir, *overrides):
    """The resolved config of an RL run (the model and data paths are never opened)."""
    base = ["model.path=/models/tiny", "data.train_files=[/data/train.jsonl]"]
    config = load_config(RLConfig, None, [*base, f"trainer.run_dir={run_dir}", *overrides])
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_config(config, run_dir / "config.yaml")
    return config


def log_steps(run_dir, metrics_of_step, steps=STEPS, validation=None):
    """``metrics_of_step(step)`` for steps 1..steps through the jsonl sink; ``validation``
    (a dict) logged at step 0 and after the last step, as the RL loop does."""
    tracker = Tracker(run_dir, TrackingConfig(sinks=["jsonl"]))
    if validation is not None:
        tracker.log(validation, 0)
    for step in range(1, steps + 1):
        metrics = metrics_of_step(step)
        if validation is not None and step == steps:
            metrics = metrics | {key: value + 0.1 for key, value in validation.items()}
        tracker.log(metrics, step)
    tracker.close()


def write_generations(run_dir, steps=STEPS, per_step=4, prompt="say abcd"):
    with open(run_dir / "generations.jsonl", "a") as out:
        for step in range(1, steps + 1):
            for row in range(per_step):
                record = {
                    "step": step,
                    "data_source": "digits",
                    "prompt": prompt,
                    "response": f"{row}{step}<|im_end|>",
                    "score": row / per_step,
                    "ground_truth": "",
                }
                out.write(json.dumps(record) + "\n")


def full_run(run_dir):
    """An async agent RL run that logged every metric the report plots, a little noisy."""
    rl_config(
        run_dir,
        "trainer.mode=async",
        "rollout.agent.tools=[tests.x:multiply]",
        "trainer.val_samples_per_prompt=4",
        "teacher.model.path=/models/teacher",
    )
    log_steps(
        run_dir,
        lambda step: {k: v * (1 + 0.1 * step + 0.05 * (step % 2)) for k, v in EVERY_METRIC.items()},
        validation=SAMPLED_VALIDATION,
    )
    write_generations(run_dir, prompt="say <script>alert('x')</script> & more")
    return run_dir
