"""Every policy loss against its per-token float64 reference (tests/algos/loss_reference.py):
values, gradients and metrics, on random masks with NaN in every masked position."""

import pytest
import torch

from ascent.algos.losses import POLICY_LOSSES
from ascent.algos.types import PolicyLossInputs
from tests.algos import loss_reference as ref
from tests.algos.cases import make_case

CASES = [
    ("ppo", {}, ref.ppo, 0.3),
    ("ppo", {"clip_low": 0.2, "clip_high": 0.28}, ref.ppo, 0.3),
    ("ppo", {"dual_clip": None}, ref.ppo, 1.5),
    ("ppo", {"dual_clip": 1.5}, ref.ppo, 1.5),
    ("gspo", {}, ref.gspo, 1e-4),
    ("gspo", {"clip_low": 0.05, "clip_high": 0.1}, ref.gspo, 0.3),
    ("reinforce", {}, ref.reinforce, 0.3),
    ("cispo", {}, ref.cispo, 0.3),
    ("cispo", {"clip_low": 0.2, "clip_high": 0.2}, ref.cispo, 0.3),
    ("geo_mean", {}, ref.geo_mean, 0.3),
    ("geo_mean", {"clip_low": 0.1, "clip_high": 0.2}, ref.geo_mean, 0.5),
    ("kl_cov", {}, ref.kl_cov, 0.3),
    ("kl_cov", {"kl_cov_ratio": 0.1, "kl_coef": 0.5}, ref.kl_cov, 0.3),
    ("sppo", {}, ref.sppo, 0.3),
]


def run_loss(name, params, case, log_probs):
    inputs = PolicyLossInputs(log_probs, case.old_log_probs, case.advantages, case.mask)
    return POLICY_LOSSES.get(name)(inputs, **params)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("name", "params", "reference", "drift"), CASES, ids=str)
def test_values_and_gradients_match_reference(name, params, reference, drift, seed):
    case = make_case(seed, drift=drift)
    weights = torch.rand(
        case.mask.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )

    log_probs = case.log_probs.clone().requires_grad_()
    out = run_loss(name, params, case, log_probs)
    (out.per_token * weights).sum().backward()

    ref_log_probs = case.log_probs.clone().requires_grad_()
    expected = reference(ref_log_probs, case.old_log_probs, case.advantages, case.mask, **params)
    sum(weights[c] * loss for c, loss in expected.items()).backward()

    assert torch.isfinite(out.per_token).all() and (out.per_token[~case.mask] == 0).all()
    want = torch.zeros_like(out.per_token)
    for cell, loss in expected.items():
        want[cell] = loss.detach()
    torch.testing.assert_close(out.per_token.detach(), want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(log_probs.grad, ref_log_probs.grad, rtol=1e-9, atol=1e-12)
    assert (log_probs.grad[~case.mask] == 0).all()
    assert log_probs.grad.abs().sum() > 0, "the loss should depend on the log-probs"


@pytest.mark.parametrize("params", [{}, {"clip_low": 0.1, "clip_high": 0.3, "dual_clip": 2.0}])
def test_ppo_metrics_match_reference(params):
    case = make_case(5, drift=1.0)
    out = run_loss("ppo", params, case, case.log_probs)
    want = ref.ppo_metrics(case.log_probs, case.old_log_probs, case.advantages, case.mask, **params)
    for key, value in want.items():
        assert out.metrics[key].item() == pytest.approx(value, rel=1e-6), key
    assert 0 < want["pg_clipfrac"] < 1 and want["pg_clipfrac_lower"] > 0  # the case exercises both


@pytest.mark.parametrize("name", POLICY_LOSSES.names())
def test_every_loss_returns_finite_detached_metrics(name):
    case = make_case(1)
    log_probs = case.log_probs.clone().requires_grad_()
    out = run_loss(name, {}, case, log_probs)
    assert out.metrics, f"{name} returns no metrics"
    for key, value in out.metrics.items():
        assert value.dim() == 0 and not value.requires_grad and torch.isfinite(value), key
    assert "ppo_kl" in out.metrics


def test_clip_cov_zeroes_exactly_the_eligible_tokens_when_budget_allows():
    case = make_case(2, drift=0.3)
    params = {"clip_cov_ratio": 1.0, "cov_lb": -float("inf"), "cov_ub": float("inf")}
    out = run_loss("clip_cov", params, case, case.log_probs)
    ppo = ref.ppo(case.log_probs, case.old_log_probs, case.advantages, case.mask, dual_clip=None)
    for (i, t), loss in ppo.items():
        ratio = (case.log_probs[i, t] - case.old_log_probs[i, t]).exp()
        a = case.advantages[i, t]
        was_clipped = -a * ratio.clamp(0.8, 1.2) > -a * ratio
        want = loss.item() if was_clipped else 0.0  # every unclipped token is eligible
        assert out.per_token[i, t].item() == pytest.approx(want, abs=1e-12)


def test_clip_cov_drops_a_budgeted_random_subset_of_eligible_tokens():
    case = make_case(3, batch=64, length=24, drift=0.3)
    params = {"clip_cov_ratio": 0.01, "cov_lb": 0.0, "cov_ub": 5.0}
    gen = torch.Generator().manual_seed(0)
    out = run_loss("clip_cov", {**params, "generator": gen}, case, case.log_probs)
    ppo = ref.ppo(case.log_probs, case.old_log_probs, case.advantages, case.mask, dual_clip=None)
    cov = ref.covariances(case.log_probs, case.advantages, case.mask)
    dropped = [
        c
        for c, loss in ppo.items()
        if out.per_token[c].item() != pytest.approx(loss.item(), abs=1e-12)
    ]
    eligible = [
        c
        for c, v in cov.items()
        if 0.0 < v < 5.0
        and not (
            -case.advantages[c] * (case.log_probs[c] - case.old_log_probs[c]).exp().clamp(0.8, 1.2)
            > -case.advantages[c] * (case.log_probs[c] - case.old_log_probs[c]).exp()
        )
    ]
    budget = max(int(0.01 * len(cov)), 1)
    assert len(eligible) > budget  # the case makes the random choice matter
    assert len(dropped) == budget and set(dropped) <= set(eligible)
    assert all(out.per_token[c] == 0 for c in dropped)
    assert out.metrics["cov_dropped_frac"].item() == pytest.approx(budget / len(cov))
    again = run_loss(
        "clip_cov", {**params, "generator": torch.Generator().manual_seed(0)}, case, case.log_probs
    )
    assert torch.equal(again.per_token, out.per_token), "a seeded generator reproduces the choice"


def test_ppo_rejects_dual_clip_not_above_one():
    case = make_case(0)
    with pytest.raises(ValueError, match="dual_clip"):
        run_loss("ppo", {"dual_clip": 0.9}, case, case.log_probs)


def test_fixed_aggregation_of_sequence_losses():
    case = make_case(0)
    for name in ("gspo", "geo_mean", "sppo"):
        assert run_loss(name, {}, case, case.log_probs).aggregation == "seq-mean-token-mean"
    for name in ("ppo", "reinforce", "cispo", "clip_cov", "kl_cov"):
        assert run_loss(name, {}, case, case.log_probs).aggregation is None


def test_only_geo_mean_combines_importance_weights_per_sequence():
    case = make_case(0)
    for name in POLICY_LOSSES.names():
        weighting = run_loss(name, {}, case, case.log_probs).weighting
        want = "sequence_geometric_mean" if name == "geo_mean" else "token"
        assert weighting == want, name
