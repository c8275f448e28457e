"""PRIME end to end on the toy task (make the response digits): the policy learns with the
preset (implicit PRM, reference, dynamic sampling as the prompt filter), and the implicit
PRM trains every step and hands out token rewards that vary. Exact resume with the PRM:
``test_resume``; the PRM worker learning labels: ``tests/workers/test_implicit_prm.py``;
PRIME against GRPO on the quickstart task: ``bench/prime_learning.py``."""

import pytest
import torch

from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.process_rewards import pairwise_accuracy
from tests.trainer.rl_setup import config, metric


@pytest.mark.learning
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
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


@pytest.mark.parametrize("seed", range(4))
def test_pairwise_accuracy_counts_right_wrong_pairs_within_groups(seed):
    """Against a loop over every pair: groups of uneven sizes, interleaved, with ties."""
    g = torch.Generator().manual_seed(seed)
    groups = torch.randint(0, 5, (30,), generator=g) * 7 + 3  # arbitrary ids
    rewards = torch.randint(0, 4, (30,), generator=g).float()  # small range: ties happen
    correct = torch.rand(30, generator=g) < 0.4
    wins = [
        1.0 if rewards[i] > rewards[j] else 0.5 if rewards[i] == rewards[j] else 0.0
        for i in range(30)
        for j in range(30)
        if groups[i] == groups[j] and correct[i] and not correct[j]
    ]
    assert pairwise_accuracy(rewards, correct, groups) == pytest.approx(sum(wins) / len(wins))
    assert pairwise_accuracy(rewards, torch.ones(30, dtype=torch.bool), groups) is None
