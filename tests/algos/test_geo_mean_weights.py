"""GMPO (geo_mean) with rollout-correction weights, through the actor objective: each sequence
is weighted by the geometric mean of its token weights (as verl does), not the arithmetic."""

import math

import pytest
import torch

from ascent.algos.aggregation import LossNormalizer
from ascent.algos.losses import POLICY_LOSSES
from ascent.algos.objective import actor_objective
from ascent.algos.types import PolicyLossInputs
from tests.algos import loss_reference as ref
from tests.algos.cases import make_case


def policy_loss(log_probs, old_log_probs, advantages, mask, weights, **params):
    """The policy term of the actor objective for geo_mean (a 0-dim tensor)."""
    policy = POLICY_LOSSES.get("geo_mean")(
        PolicyLossInputs(log_probs, old_log_probs, advantages, mask), **params
    )
    # geo_mean fixes its own aggregation, so the configured mode here must not matter.
    return actor_objective(
        policy,
        mask,
        mode="token-mean",
        normalizer=LossNormalizer.from_mask(mask),
        weights=weights,
    ).loss


def nan_outside(mask, x):
    return torch.where(mask, x, torch.nan)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("params", [{}, {"clip_low": 0.1, "clip_high": 0.2}], ids=str)
def test_token_weights_match_float64_reference(seed, params):
    case = make_case(seed, drift=0.5)
    gen = torch.Generator().manual_seed(seed)
    weights = 0.05 + 1.95 * torch.rand(case.mask.shape, generator=gen, dtype=torch.float64)
    weights = nan_outside(case.mask, weights)

    log_probs = case.log_probs.clone().requires_grad_()
    got = policy_loss(log_probs, case.old_log_probs, case.advantages, case.mask, weights, **params)
    got.backward()

    ref_log_probs = case.log_probs.clone().requires_grad_()
    want = ref.geo_mean_weighted(
        ref_log_probs, case.old_log_probs, case.advantages, case.mask, weights, **params
    )
    want.backward()

    assert got.item() == pytest.approx(want.item(), rel=1e-10, abs=1e-12)
    torch.testing.assert_close(log_probs.grad, ref_log_probs.grad, rtol=1e-9, atol=1e-12)
    assert (log_probs.grad[~case.mask] == 0).all()


def test_sequence_level_weights_weight_whole_rows():
    """A weight constant over a row (sequence-level correction) scales that row's loss by it:
    its geometric mean is the weight itself, up to the 1e-10 and 1e-8 guards (~1e-8)."""
    case = make_case(3, drift=0.5)
    gen = torch.Generator().manual_seed(3)
    row_weights = 0.2 + 1.8 * torch.rand(case.mask.shape[0], 1, generator=gen, dtype=torch.float64)
    weights = nan_outside(case.mask, row_weights.expand_as(case.mask))

    log_probs = case.log_probs.clone().requires_grad_()
    policy_loss(log_probs, case.old_log_probs, case.advantages, case.mask, weights).backward()

    plain_log_probs = case.log_probs.clone().requires_grad_()
    plain = POLICY_LOSSES.get("geo_mean")(
        PolicyLossInputs(plain_log_probs, case.old_log_probs, case.advantages, case.mask)
    )
    lengths = case.mask.sum(-1).clamp(min=1)
    row_losses = plain.per_token.sum(-1) / lengths  # -Abar_i R_i, 0 for the empty row
    want = (row_weights.squeeze(-1) * row_losses).sum() / case.mask.any(-1).sum()
    want.backward()

    got = policy_loss(case.log_probs, case.old_log_probs, case.advantages, case.mask, weights)
    assert got.item() == pytest.approx(want.item(), rel=1e-7)
    torch.testing.assert_close(log_probs.grad, plain_log_probs.grad, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize(("length", "approx_factor"), [(4, 3.16e-3), (1000, 0.977)])
def test_masked_is_zero_on_one_token_shrinks_the_sequence_it_does_not_drop_it(
    length, approx_factor
):
    """Masked IS puts weight 0 on a token. Under GMPO that token still counts in R_i and
    Abar_i, and the sequence's weight becomes exp((log 1e-10 + (n-1) log(1 + 1e-10)) / n),
    about 1e-10^(1/n): strong for a short response, weak for a long one."""
    gen = torch.Generator().manual_seed(0)
    mask = torch.ones(1, length, dtype=torch.bool)
    old = -torch.rand(1, length, generator=gen, dtype=torch.float64) * 3 - 0.05
    lp = old + 0.3 * torch.randn(1, length, generator=gen, dtype=torch.float64)
    advantages = torch.full((1, length), 0.8, dtype=torch.float64)
    weights = torch.ones(1, length, dtype=torch.float64)
    weights[0, length // 2] = 0.0

    unweighted_lp = lp.clone().requires_grad_()
    unweighted = policy_loss(unweighted_lp, old, advantages, mask, None)
    unweighted.backward()
    weighted_lp = lp.clone().requires_grad_()
    weighted = policy_loss(weighted_lp, old, advantages, mask, weights)
    weighted.backward()

    factor = math.exp((math.log(1e-10) + (length - 1) * math.log(1 + 1e-10)) / (length + 1e-8))
    assert factor == pytest.approx(approx_factor, rel=1e-2)
    assert weighted.item() == pytest.approx(factor * unweighted.item(), rel=1e-9)
    torch.testing.assert_close(weighted_lp.grad, factor * unweighted_lp.grad, rtol=1e-9, atol=0)
    assert weighted_lp.grad[0, length // 2] != 0, "the masked token still shapes R_i"

    # Masking the whole sequence (sequence-level MIS) does remove it, up to 1e-10.
    dropped = policy_loss(lp, old, advantages, mask, torch.zeros(1, length, dtype=torch.float64))
    assert abs(dropped.item()) <= 1.01e-10 * abs(unweighted.item())
