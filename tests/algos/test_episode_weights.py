"""Group estimators with sample weights count an episode once however many rows it spans.

A multi-turn episode whose chat template drifted is split into k samples (rows), each carrying
the episode's outcome on its last token and weight 1/k. Splitting episodes this way must leave
every advantage as it was with one row per episode: the split rows get their episode's
advantage on each of their tokens, and every other row keeps its own.
"""

import pytest
import torch

from ascent.algos.advantages import compute_advantages
from ascent.algos.groups import group_stats
from ascent.algos.types import AdvantageInputs

WIDTH = 12


def outcome_rows(lengths: list[int], scores: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """(rewards, mask), (B, WIDTH): each row's score on its last valid token."""
    mask = torch.zeros(len(lengths), WIDTH)
    rewards = torch.zeros(len(lengths), WIDTH)
    for row, (length, score) in enumerate(zip(lengths, scores, strict=True)):
        mask[row, :length] = 1
        rewards[row, length - 1] = score
    return rewards, mask


def episodes(seed: int, groups: int = 4, n: int = 5):
    """Whole episodes (one row each) and the same episodes with some split in two."""
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, 3, (groups * n,), generator=generator).float().tolist()
    lengths = torch.randint(4, WIDTH + 1, (groups * n,), generator=generator).tolist()
    group_ids = [g for g in range(groups) for _ in range(n)]
    split = torch.rand(groups * n, generator=generator) < 0.4
    pieces, piece_scores, piece_groups, weights, source = [], [], [], [], []
    for row in range(groups * n):
        parts = (
            [lengths[row] // 2, lengths[row] - lengths[row] // 2] if split[row] else [lengths[row]]
        )
        for part in parts:
            pieces.append(part)
            piece_scores.append(scores[row])
            piece_groups.append(group_ids[row])
            weights.append(1 / len(parts))
            source.append(row)
    whole = (*outcome_rows(lengths, scores), torch.tensor(group_ids))
    parts = (*outcome_rows(pieces, piece_scores), torch.tensor(piece_groups))
    return whole, parts, torch.tensor(weights), source


@pytest.mark.parametrize("estimator", ["grpo", "drgrpo", "rloo", "gpg", "reinforce_pp_baseline"])
@pytest.mark.parametrize("seed", range(4))
def test_split_episodes_keep_their_advantages(estimator: str, seed: int) -> None:
    (rewards, mask, groups), (p_rewards, p_mask, p_groups), weights, source = episodes(seed)
    whole = compute_advantages(estimator, AdvantageInputs(rewards, mask, groups)).advantages
    split = compute_advantages(
        estimator, AdvantageInputs(p_rewards, p_mask, p_groups, sample_weights=weights)
    ).advantages
    for row, episode in enumerate(source):
        valid = p_mask[row].bool()
        expected = whole[episode][0]  # outcome estimators: one value on every token
        assert torch.allclose(split[row][valid], expected.expand(int(valid.sum())), atol=1e-5)
    unweighted = compute_advantages(estimator, AdvantageInputs(p_rewards, p_mask, p_groups))
    if bool((weights < 1).any()) and estimator != "reinforce_pp_baseline":
        # Without the weights a split episode counts twice and moves its group's baseline.
        assert not torch.allclose(unweighted.advantages, split, atol=1e-5)


def test_unit_weights_are_the_unweighted_statistics() -> None:
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(30, generator=generator, dtype=torch.float64)
    groups = torch.randint(0, 6, (30,), generator=generator)
    plain, weighted = group_stats(scores, groups), group_stats(scores, groups, torch.ones(30))
    for name in ("mean", "std", "count", "uniform"):
        assert torch.equal(getattr(plain, name), getattr(weighted, name))
