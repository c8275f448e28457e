"""The cookbook's RL trainer learns through ``ascent service``: ``tinker_cookbook``'s
``recipes.math_rl.train`` on its own arithmetic environment (addition problems it makes
itself; reward 1 for the right sum, -0.1 for a malformed answer), unchanged but for its base
URL, with SmolLM2-135M-Instruct served under a model name the cookbook knows, LoRA rank 8,
``loss_fn=importance_sampling``. Over three seeds of 12 steps (8 groups of 4 samples a
step), every seed's mean reward over its last three steps beats its first three, by 0.05 on
average (measured: +0.10, +0.39, +0.23). Slow (about 3 minutes a seed); needs
``make cookbook-venv`` and the packaged real model."""

import json
import os
import statistics

import pytest

from ascent.models.gguf import MissingDependency, packaged_checkpoint
from tests.servers import ascent_service
from tests.service.test_cookbook_loops import MODEL_NAME, PYTHON, VENV, records, run_loop

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SEEDS = (0, 1, 2)
MARGIN = 0.05


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    if not PYTHON.is_file():
        pytest.fail(f"no cookbook environment at {VENV}: run `make cookbook-venv`")
    try:
        model = packaged_checkpoint("smollm2")
    except MissingDependency as missing:
        pytest.skip(f"the real model is not installed: {missing}")
    root = tmp_path_factory.mktemp("cookbook-learning")
    (root / MODEL_NAME).parent.mkdir(parents=True)
    os.symlink(model, root / MODEL_NAME)  # the service's weights and the loop's tokenizer
    return root


def test_the_cookbooks_rl_trainer_raises_its_reward(workdir):
    flags = ("--name", MODEL_NAME, "--root", str(workdir / "checkpoints"))
    gains = {}
    with ascent_service(workdir / MODEL_NAME, workdir / "service.log", *flags) as service:
        for seed in SEEDS:
            log = workdir / f"seed{seed}"
            run_loop(
                workdir,
                service,
                "math_rl.train",
                "env=arithmetic",
                f"seed={seed}",
                "loss_fn=importance_sampling",
                "groups_per_batch=8",
                "group_size=4",
                "max_tokens=8",
                "max_steps=12",
                "learning_rate=5e-4",
                "eval_every=0",
                "save_every=0",
                f"log_path={log}",
            )
            rows = records(log / "metrics.jsonl")
            rewards = [row["env/all/reward/total"] for row in rows if "env/all/reward/total" in row]
            assert len(rewards) == 12, rewards
            gains[seed] = statistics.mean(rewards[-3:]) - statistics.mean(rewards[:3])
    print(json.dumps(gains))
    assert all(gain > 0 for gain in gains.values()), gains
    assert statistics.mean(gains.values()) >= MARGIN, gains
