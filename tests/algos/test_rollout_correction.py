"""Rollout-correction weights (token/sequence x truncate/mask) and mismatch metrics."""

import math
import statistics

import pytest
import torch

from ascent.algos.rollout_correction import rollout_correction
from tests.algos.cases import make_case


def reference(case, level, mode, lower, upper):
    weights, truncated, masked = {}, 0, 0
    rows = {}
    for i in range(case.mask.shape[0]):
        for t in range(case.mask.shape[1]):
            if case.mask[i, t]:
                rows.setdefault(i, []).append(t)
    k1 = k3 = 0.0
    count = 0
    ratios = []
    for i, ts in rows.items():
        log_rhos = [float(case.old_log_probs[i, t] - case.rollout_log_probs[i, t]) for t in ts]
        seq_rho = math.exp(min(max(sum(log_rhos), -20), 20))
        for t, lr in zip(ts, log_rhos, strict=True):
            lr_c = min(max(lr, -20), 20)
            rho = math.exp(lr_c) if level == "token" else seq_rho
            ratios.append(rho)
            if mode == "truncate":
                weights[i, t] = min(rho, upper)
                truncated += rho > upper
            elif mode == "mask":
                keep = lower <= rho <= upper
                weights[i, t] = float(keep)
                masked += not keep
            else:
                weights[i, t] = 1.0
            k1 += -lr_c
            k3 += math.exp(lr_c) - 1 - lr_c
            count += 1
    spread = {
        "ratio_mean": statistics.fmean(ratios),
        "ratio_std": statistics.pstdev(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }
    return weights, truncated / count, masked / count, k1 / count, k3 / count, spread


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", ["none", "truncate", "mask"])
def test_weights_and_metrics_match_reference(level, mode):
    case = make_case(0, drift=0.6)
    out = rollout_correction(
        case.old_log_probs,
        case.rollout_log_probs,
        case.mask,
        level=level,
        mode=mode,
        lower=0.6,
        upper=1.6,
    )
    weights, truncated, masked, k1, k3, spread = reference(case, level, mode, 0.6, 1.6)
    assert (out.weights[~case.mask] == 0).all() and not out.weights.requires_grad
    for cell, w in weights.items():
        assert out.weights[cell].item() == pytest.approx(w, rel=1e-12)
    assert out.metrics["truncated_frac"].item() == pytest.approx(truncated, rel=1e-6)
    assert out.metrics["masked_frac"].item() == pytest.approx(masked, rel=1e-6)
    assert out.metrics["mismatch_k1"].item() == pytest.approx(k1, rel=1e-9)
    assert out.metrics["mismatch_k3"].item() == pytest.approx(k3, rel=1e-9)
    for name, value in spread.items():
        assert out.metrics[name].item() == pytest.approx(value, rel=1e-9), name
    assert spread["ratio_std"] > 0.1, "the case is off-policy enough to have a spread"
    if mode == "truncate":
        assert 0 < truncated < 1
    if mode == "mask":
        assert 0 < masked < 1


def test_identical_log_probs_mean_no_mismatch():
    case = make_case(1)
    out = rollout_correction(case.old_log_probs, case.old_log_probs, case.mask, mode="mask")
    assert (out.weights[case.mask] == 1).all()
    assert (
        out.metrics["mismatch_k3"].item() == 0.0 and out.metrics["mismatch_max_abs"].item() == 0.0
    )


def test_bad_level_or_mode_is_an_error():
    case = make_case(1)
    with pytest.raises(ValueError, match="level"):
        rollout_correction(case.old_log_probs, case.rollout_log_probs, case.mask, level="row")
    with pytest.raises(ValueError, match="mode"):
        rollout_correction(case.old_log_probs, case.rollout_log_probs, case.mask, mode="clip")


def test_empty_batch_is_fine():
    mask = torch.zeros(2, 3, dtype=torch.bool)
    lp = torch.full((2, 3), torch.nan)
    out = rollout_correction(lp, lp, mask)
    assert (out.weights == 0).all() and all(torch.isfinite(v) for v in out.metrics.values())
