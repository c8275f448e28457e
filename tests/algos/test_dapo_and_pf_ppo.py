"""DAPO's overlong shaping and group filter; PF-PPO resampling."""

import pytest
import torch

from ascent.algos.group_filter import groups_with_signal
from ascent.algos.overlong import mask_truncated, overlong_penalty
from ascent.algos.pf_ppo import pf_ppo_resample, pf_ppo_weights


def test_overlong_penalty_is_zero_then_linear_down_to_minus_factor():
    lengths = torch.tensor([0, 10, 12, 13, 16, 20])
    penalty = overlong_penalty(lengths, max_length=20, buffer_length=8, factor=0.5)
    # L - Lb = 12: free up to 12, then ((12 - |y|) / 8) * 0.5.
    expected = [0.0, 0.0, 0.0, -1 / 8 * 0.5, -4 / 8 * 0.5, -8 / 8 * 0.5]
    torch.testing.assert_close(penalty, torch.tensor(expected))


def test_overlong_buffer_must_fit():
    with pytest.raises(ValueError, match="buffer_length"):
        overlong_penalty(torch.tensor([1]), max_length=4, buffer_length=8)


def test_mask_truncated_zeroes_whole_rows_only():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    out = mask_truncated(mask, torch.tensor([False, True, False]))
    assert out.tolist() == [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    assert mask.tolist()[1] == [1, 1, 1], "the input is not modified"


def test_group_filter_drops_zero_variance_groups_keeps_singletons():
    acc = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.5, 0.5])
    gid = torch.tensor([5, 5, 9, 9, 2, 2, 8, 3, 3])
    keep = groups_with_signal(acc, gid)
    # group 5 all right, group 2 all wrong, group 3 all equal: dropped; 9 mixed, 8 singleton: kept
    assert keep.tolist() == [False, False, True, True, False, False, True, False, False]


def test_pf_ppo_weights():
    scores = torch.tensor([0.0, -2.0, 1.0, 3.0])
    torch.testing.assert_close(pf_ppo_weights(scores), torch.tensor([0.0, 4.0, 1.0, 9.0]) + 1e-8)
    torch.testing.assert_close(
        pf_ppo_weights(scores, method="max_min"), torch.tensor([0.0, 1.0, 0.0, 1.0]) + 1e-8
    )
    torch.testing.assert_close(
        pf_ppo_weights(scores, method="max_random"), torch.tensor([0.1, 0.1, 0.1, 0.4]) + 1e-8
    )
    with pytest.raises(ValueError, match="PF-PPO"):
        pf_ppo_weights(scores, method="top")


def test_pf_ppo_resampling_frequencies_follow_the_weights():
    scores = torch.tensor([0.0, -2.0, 1.0, 3.0])
    gen = torch.Generator().manual_seed(0)
    draws = torch.cat([pf_ppo_resample(scores, generator=gen) for _ in range(5000)])
    freq = torch.bincount(draws, minlength=4).double() / draws.numel()
    torch.testing.assert_close(
        freq, torch.tensor([0.0, 4 / 14, 1 / 14, 9 / 14], dtype=torch.float64), atol=0.01, rtol=0
    )
    again = pf_ppo_resample(scores, generator=torch.Generator().manual_seed(3))
    assert torch.equal(again, pf_ppo_resample(scores, generator=torch.Generator().manual_seed(3)))
