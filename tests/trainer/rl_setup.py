"""The RL test setup: a config over the toy task (make the response digits, scored by
``tests.rewards.scorers:digit_share``) and reading metrics back."""

import json

from ascent.config import load_config
from ascent.trainer.rl.config import RLConfig


def config(tiny_model, prompts, run_dir, *overrides):
    return load_config(RLConfig, None, overrides_for(tiny_model, prompts, run_dir, *overrides))


def overrides_for(tiny_model, prompts, run_dir, *overrides):
    """The test run's settings as ``key=value`` overrides (also for ``ascent train``)."""
    return [
        f"model.path={tiny_model}",
        f"data.train_files=[{prompts / 'train.jsonl'}]",
        f"data.val_files=[{prompts / 'val.jsonl'}]",
        "data.prompts_per_step=8",
        "data.chat_template=false",
        "rollout.samples_per_prompt=8",
        "rollout.max_response_length=8",
        "actor.optim.lr=3e-3",
        "reward.function=tests.rewards.scorers:digit_share",
        "reward.workers=0",
        f"trainer.run_dir={run_dir}",
        "trainer.val_every=0",
        "trainer.val_at_start=false",
        "trainer.progress_bar=false",
        "trainer.export=false",
        "trainer.resume=off",
        "tracking.sinks=[jsonl]",
        *overrides,
    ]


def metric(run_dir, key):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [record[key] for record in map(json.loads, lines) if key in record]
