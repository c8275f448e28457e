"""Rollout-correction weights (token/sequence/geometric x none/truncate/mask, and the
reject_* modes' per-sequence rejection) and the mismatch metrics, against float64
references computed one token at a time."""

import math
import statistics

import pytest
import torch

from ascent.algos.aggregation import LossNormalizer, aggregate
from ascent.algos.masking import keep_valid
from ascent.algos.rollout_correction import rollout_correction
from ascent.workers.config import RolloutCorrectionSettings
from tests.algos.cases import make_case

STATISTICS = {
    "reject_k1": lambda log_rhos: statistics.fmean(-lr for lr in log_rhos),
    "reject_k3": lambda log_rhos: statistics.fmean(math.exp(lr) - 1 - lr for lr in log_rhos),
    "reject_max_abs": lambda log_rhos: max(abs(lr) for lr in log_rhos),
}


def clamp(x):
    return min(max(x, -20), 20)


def reference(case, level, mode, lower=0.6, upper=1.6, reject_above=None):
    """Weights and metrics the slow way, one valid token at a time (float64 Python)."""
    rows = {}
    for i in range(case.mask.shape[0]):
        for t in range(case.mask.shape[1]):
            if case.mask[i, t]:
                rows.setdefault(i, []).append(t)
    weights, truncated, masked, whole_rows, k1, k3, ratios = {}, 0, 0, 0, 0.0, 0.0, []
    for i, ts in rows.items():
        log_rhos = [float(case.old_log_probs[i, t] - case.rollout_log_probs[i, t]) for t in ts]
        per_row = {"sequence": sum(log_rhos), "geometric": statistics.fmean(log_rhos)}
        row_rho = math.exp(clamp(per_row.get(level, 0.0)))
        rejected = mode in STATISTICS and not STATISTICS[mode](log_rhos) <= reject_above
        dropped = 0
        for t, lr in zip(ts, log_rhos, strict=True):
            rho = math.exp(clamp(lr)) if level == "token" else row_rho
            ratios.append(rho)
            keep = {"mask": lower <= rho <= upper}.get(mode, not rejected)
            if mode == "truncate":
                weights[i, t] = min(rho, upper)
                truncated += rho > upper
            elif mode == "none":
                weights[i, t] = 1.0
            else:
                weights[i, t] = float(keep)
                dropped += not keep
            k1 += -clamp(lr)
            k3 += math.exp(clamp(lr)) - 1 - clamp(lr)
        masked += dropped
        whole_rows += dropped == len(ts)
    count = len(ratios)
    return weights, {
        "truncated_frac": truncated / count,
        "masked_frac": masked / count,
        "masked_seq_frac": whole_rows / len(rows),
        "mismatch_k1": k1 / count,
        "mismatch_k3": k3 / count,
        "ratio_mean": statistics.fmean(ratios),
        "ratio_std": statistics.pstdev(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def assert_matches(out, weights, metrics):
    assert not out.weights.requires_grad
    for cell, w in weights.items():
        assert out.weights[cell].item() == pytest.approx(w, rel=1e-12), cell
    assert sum(out.weights[cell].item() for cell in weights) == pytest.approx(
        out.weights.sum().item(), rel=1e-12
    ), "zero outside the mask"
    for name, value in metrics.items():
        rel = 1e-6 if name.endswith("_frac") else 1e-9  # shares are counted in float32
        assert out.metrics[name].item() == pytest.approx(value, rel=rel, abs=1e-12), name


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
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
    weights, metrics = reference(case, level, mode)
    assert (out.weights[~case.mask] == 0).all()
    assert_matches(out, weights, metrics)
    assert metrics["ratio_std"] > 0.1, "the case is off-policy enough to have a spread"
    if mode == "truncate":
        assert 0 < metrics["truncated_frac"] < 1
    if mode == "mask":
        assert 0 < metrics["masked_frac"] < 1
    if mode == "mask" and level != "token":  # whole sequences go
        assert 0 < metrics["masked_seq_frac"] < 1


THRESHOLDS = {"reject_k1": 0.2, "reject_k3": 0.2, "reject_max_abs": 1.0}


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", sorted(THRESHOLDS))
def test_rejection_matches_reference(mode, level):
    """Each sequence's own k1, k3 or largest |log rho| against the threshold; the level sets
    the ratio metrics, not what is rejected."""
    case = make_case(0, drift=0.6)
    out = rollout_correction(
        case.old_log_probs,
        case.rollout_log_probs,
        case.mask,
        level=level,
        mode=mode,
        reject_above=THRESHOLDS[mode],
    )
    weights, metrics = reference(case, level, mode, reject_above=THRESHOLDS[mode])
    assert_matches(out, weights, metrics)
    assert 0.2 < metrics["masked_seq_frac"] < 0.8 and 0 < metrics["masked_frac"] < 1
    assert metrics["truncated_frac"] == 0


def shifted(case, shift):
    """The case with lp_roll = lp_train - shift on every token: log rho = shift everywhere."""
    return case.old_log_probs, case.old_log_probs - shift, case.mask


REJECTS = [
    {"level": "geometric", "mode": "mask", "lower": 0.5, "upper": 2.0},
    {"mode": "reject_k1", "reject_above": 0.5},
    {"mode": "reject_k3", "reject_above": 0.3},
    {"mode": "reject_max_abs", "reject_above": 0.5},
]


def name(settings):
    return settings["mode"] + ("_geometric" if "level" in settings else "")


@pytest.mark.parametrize("settings", REJECTS, ids=name)
def test_everything_rejected_leaves_no_gradient(settings):
    """log rho = -1 on every token: k1 = 1, k3 = 1/e, max |log rho| = 1, geometric mean 1/e,
    all past their bounds; no weight is left, and a loss weighted by them has no gradient."""
    case = make_case(2)
    out = rollout_correction(*shifted(case, -1.0), **settings)
    assert (out.weights == 0).all()
    assert out.metrics["masked_frac"].item() == out.metrics["masked_seq_frac"].item() == 1.0
    log_probs = case.log_probs.clone().requires_grad_()
    loss = aggregate(
        -keep_valid(log_probs, case.mask),
        case.mask,
        "token-mean",
        LossNormalizer.from_mask(case.mask),
        weights=out.weights,
    )
    loss.backward()
    assert loss.item() == 0 and (log_probs.grad == 0).all()


def test_k1_is_signed_k3_and_max_abs_are_not():
    """log rho = +1 (the trainer likes the samples more than the rollout did): k1 = -1 keeps
    every sequence, k3 = e - 2 and |log rho| = 1 reject them, as does a geometric mean of e."""
    args = shifted(make_case(2), 1.0)
    kept = rollout_correction(*args, mode="reject_k1", reject_above=0.5)
    assert kept.metrics["masked_seq_frac"].item() == 0 and (kept.weights[args[2]] == 1).all()
    for settings in REJECTS:
        if settings["mode"] != "reject_k1":
            out = rollout_correction(*args, **settings)
            assert out.metrics["masked_seq_frac"].item() == 1, settings


@pytest.mark.parametrize("settings", REJECTS, ids=name)
def test_a_nan_log_prob_rejects_its_sequence_only(settings):
    case = make_case(3)
    train, roll, mask = shifted(case, 0.0)
    row = int(mask.sum(-1).argmax())
    train = train.clone()
    train[row, int(mask[row].nonzero()[0])] = torch.nan
    out = rollout_correction(train, roll, mask, **settings)
    assert (out.weights[row] == 0).all()
    others = mask.clone()
    others[row] = False
    assert (out.weights[others] == 1).all()
    present = mask.any(-1).sum().item()
    assert out.metrics["masked_seq_frac"].item() == pytest.approx(1 / present)


def test_reject_modes_need_a_threshold():
    case = make_case(1)
    with pytest.raises(ValueError, match="reject_above"):
        rollout_correction(case.old_log_probs, case.rollout_log_probs, case.mask, mode="reject_k3")
    with pytest.raises(ValueError, match=r"set rollout_correction\.reject_above"):
        RolloutCorrectionSettings(mode="reject_max_abs")
    assert RolloutCorrectionSettings(mode="reject_k1", reject_above=0.1).reject_above == 0.1


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


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
@pytest.mark.parametrize("mode", ["none", "truncate", "mask", *sorted(THRESHOLDS)])
def test_empty_batch_is_fine(mode, level):
    mask = torch.zeros(2, 3, dtype=torch.bool)
    lp = torch.full((2, 3), torch.nan)
    out = rollout_correction(lp, lp, mask, mode=mode, level=level, reject_above=0.1)
    assert (out.weights == 0).all() and all(torch.isfinite(v) for v in out.metrics.values())
    assert out.metrics["masked_seq_frac"].item() == 0
