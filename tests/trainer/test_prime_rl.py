"""PRIME end to end on the toy task (make the response digits): the policy learns with the
preset (implicit PRM, reference, dynamic sampling as the prompt filter), and the implicit
PRM trains every step and hands out token rewards that vary. Exact resume with the PRM:
``test_resume``; the PRM worker learning labels: ``tests/workers/test_implicit_prm.py``;
PRIME against GRPO on the quickstart task: ``bench/prime_learning.py``."""

import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric


@pytest.mark.learning
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_prime_learns_and_trains_its_prm_every_step(tiny_model, prompts, tmp_path, seed):
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path,
            "algorithm.name=prime",
            "implicit_prm.optim.lr=1e-4",
            "trainer.total_steps=30",
            f"trainer.seed={seed}",
            f"data.seed={seed}",
        )
    )
    scores = metric(tmp_path, "critic/score/mean")
    first, last = sum(scores[:5]) / 5, sum(scores[-5:]) / 5
    assert last > first + 0.4, f"score went from {first:.2f} to {last:.2f}: {scores}"
    assert len(metric(tmp_path, "prm/loss")) == len(scores) == 30  # the PRM trained each step
    spread = metric(tmp_path, "prime/token_reward/std")
    assert len(spread) == 30 and min(spread) > 0, spread  # dense rewards, not all zero
    assert metric(tmp_path, "prime/pairwise_accuracy")  # logged whenever right and wrong meet
