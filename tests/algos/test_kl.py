"""KL estimators (values and straight-through gradients) and the KL controllers."""

import math

import pytest
import torch

from ascent.algos.kl import KL_ESTIMATORS, kl_estimate, kl_penalty_in_reward
from ascent.algos.kl_control import AdaptiveKLController, FixedKLController
from tests.algos.cases import make_case
from tests.algos.reference import valid_positions


def reference_kl(x: float, name: str) -> float:
    base = name.removesuffix("+")
    if base == "k1":
        return x
    if base == "abs":
        return abs(x)
    if base == "k2":
        return 0.5 * x * x
    neg = min(max(-x, -20.0), 20.0)
    return min(max(math.exp(neg) - neg - 1, -10.0), 10.0)


def reference_gradient(x: float, name: str) -> float:
    """d kl / d lp: the k2 gradient (x) for straight-through variants."""
    if name.endswith("+") or name == "k2":
        return x
    if name == "k1":
        return 1.0
    if name == "abs":
        return math.copysign(1.0, x)
    neg = -x
    inside = -20 <= neg <= 20 and -10 <= math.exp(neg) - neg - 1 <= 10
    return (1 - math.exp(neg)) if inside else 0.0


@pytest.mark.parametrize("name", KL_ESTIMATORS)
def test_estimators_match_formulas_values_and_gradients(name):
    case = make_case(0, drift=2.0)
    log_probs = case.log_probs.clone().requires_grad_()
    kl = kl_estimate(log_probs, case.ref_log_probs, case.mask, name)
    kl.sum().backward()
    assert (kl[~case.mask] == 0).all() and (log_probs.grad[~case.mask] == 0).all()
    for i, t in valid_positions(case.mask.tolist()):
        x = float(case.log_probs[i, t] - case.ref_log_probs[i, t])
        assert kl[i, t].item() == pytest.approx(reference_kl(x, name), rel=1e-12, abs=1e-12)
        assert log_probs.grad[i, t].item() == pytest.approx(reference_gradient(x, name), rel=1e-12)


def test_k3_clamps_extreme_log_ratios():
    lp = torch.tensor([[0.0, 0.0, 0.0]])
    ref = torch.tensor([[-30.0, 30.0, 0.0]])  # x = 30, -30, 0
    kl = kl_estimate(lp, ref, torch.ones(1, 3), "k3")
    # x = -30: -x clamps to 20 and exp(20) - 21 clamps to 10; x = 30: exp(-20) + 19 ~ 19 -> 10.
    assert kl.tolist() == [[10.0, 10.0, 0.0]]


def test_verl_aliases_and_unknown_names():
    case = make_case(1)
    for alias, name in [("kl", "k1"), ("mse", "k2"), ("low_var_kl", "k3"), ("low_var_kl+", "k3+")]:
        a = kl_estimate(case.log_probs, case.ref_log_probs, case.mask, alias)
        b = kl_estimate(case.log_probs, case.ref_log_probs, case.mask, name)
        assert torch.equal(a, b)
    for bad in ("k4", "abs+", "k2+"):
        with pytest.raises(ValueError, match="KL estimator"):
            kl_estimate(case.log_probs, case.ref_log_probs, case.mask, bad)


def test_kl_in_reward_subtracts_beta_kl_and_reports_sequence_mean():
    case = make_case(2)
    scores = torch.where(case.mask, 0.0, torch.nan).double()
    rewards, metrics = kl_penalty_in_reward(
        scores, case.old_log_probs, case.ref_log_probs, case.mask, beta=0.5, estimator="k1"
    )
    per_seq = []
    for i in range(case.mask.shape[0]):
        ts = case.mask[i].nonzero().flatten().tolist()
        for t in range(case.mask.shape[1]):
            x = float(case.old_log_probs[i, t] - case.ref_log_probs[i, t]) if t in ts else 0.0
            assert rewards[i, t].item() == pytest.approx(-0.5 * x, abs=1e-12)
        per_seq.append(
            sum(float(case.old_log_probs[i, t] - case.ref_log_probs[i, t]) for t in ts) / len(ts)
            if ts
            else 0.0
        )
    assert metrics["kl"].item() == pytest.approx(sum(per_seq) / len(per_seq), rel=1e-9)


def test_fixed_controller_never_moves():
    ctl = FixedKLController(0.05)
    ctl.update(kl=10.0, n_steps=256)
    assert ctl.value == 0.05


def test_adaptive_controller_follows_the_formula_and_resumes():
    ctl = AdaptiveKLController(value=0.1, target=0.02, horizon=10_000)
    ctl.update(kl=0.03, n_steps=512)  # error 0.5 clips to 0.2
    assert ctl.value == pytest.approx(0.1 * (1 + 0.2 * 512 / 10_000))
    ctl.update(kl=0.018, n_steps=512)  # error -0.1
    expected = 0.1 * (1 + 0.2 * 512 / 10_000) * (1 - 0.1 * 512 / 10_000)
    assert ctl.value == pytest.approx(expected)
    resumed = AdaptiveKLController(value=0.1, target=0.02, horizon=10_000)
    resumed.load_state_dict(ctl.state_dict())
    assert resumed.value == ctl.value
    with pytest.raises(ValueError, match="target"):
        AdaptiveKLController(value=0.1, target=0.0, horizon=1)
