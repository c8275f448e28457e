"""Independent references for the policy losses: one valid token at a time, float64 scalar
tensor arithmetic in Python loops, written from docs/ALGORITHMS.md. Scalar autograd gives the
reference gradient; nothing is shared with the vectorised code under test.

Each loss function returns {(i, t): 0-dim loss tensor} over the valid tokens only;
geo_mean_weighted, whose importance weights act per sequence, returns the scalar loss.
"""

import math

import torch
from torch import Tensor

from tests.algos.reference import valid_positions


def _log_ratio(lp: Tensor, old: Tensor) -> Tensor:
    return torch.clamp(lp - old, -20.0, 20.0)


def ppo(lp, old, adv, mask, clip_low=0.2, clip_high=0.2, dual_clip=3.0) -> dict:
    out = {}
    for i, t in valid_positions(mask):
        a, ratio = float(adv[i, t]), torch.exp(_log_ratio(lp[i, t], old[i, t]))
        loss = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - clip_low, 1 + clip_high))
        if dual_clip is not None and a < 0:
            loss = torch.minimum(loss, torch.tensor(-a * dual_clip, dtype=loss.dtype))
        out[i, t] = loss
    return out


def ppo_metrics(lp, old, adv, mask, clip_low=0.2, clip_high=0.2, dual_clip=3.0) -> dict:
    cells = valid_positions(mask)
    clipped = lower = 0
    kl = 0.0
    for i, t in cells:
        a, lr = float(adv[i, t]), max(min(float(lp[i, t]) - float(old[i, t]), 20.0), -20.0)
        ratio = torch.tensor(lr, dtype=torch.float64).exp().item()
        unclipped, bounded = -a * ratio, -a * min(max(ratio, 1 - clip_low), 1 + clip_high)
        clipped += bounded > unclipped
        lower += a < 0 and max(unclipped, bounded) > -a * dual_clip
        kl += -lr
    n = len(cells)
    return {"pg_clipfrac": clipped / n, "pg_clipfrac_lower": lower / n, "ppo_kl": kl / n}


def _rows(mask) -> dict[int, list[int]]:
    rows: dict[int, list[int]] = {}
    for i, t in valid_positions(mask):
        rows.setdefault(i, []).append(t)
    return rows


def gspo(lp, old, adv, mask, clip_low=3e-4, clip_high=4e-4) -> dict:
    out = {}
    for i, ts in _rows(mask).items():
        seq_log_ratio = sum(lp[i, t] - old[i, t] for t in ts) / len(ts)
        for t in ts:
            a = float(adv[i, t])
            log_ratio = lp[i, t] - lp[i, t].detach() + seq_log_ratio.detach()
            ratio = torch.exp(torch.clamp(log_ratio, max=10.0))
            bounded = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
            out[i, t] = torch.maximum(-a * ratio, -a * bounded)
    return out


def reinforce(lp, old, adv, mask) -> dict:
    return {(i, t): -float(adv[i, t]) * lp[i, t] for i, t in valid_positions(mask)}


def sppo(lp, old, adv, mask) -> dict:
    """(sum_t (lp - old) - a_i)^2 on each of row i's tokens, a_i its tokens' mean advantage."""
    out = {}
    for i, ts in _rows(mask).items():
        target = sum(float(adv[i, t]) for t in ts) / len(ts)
        log_ratio = sum(lp[i, t] - old[i, t] for t in ts)
        for t in ts:
            out[i, t] = (log_ratio - target) ** 2
    return out


def cispo(lp, old, adv, mask, clip_low=1.0, clip_high=0.28) -> dict:
    out = {}
    for i, t in valid_positions(mask):
        ratio = torch.exp(_log_ratio(lp[i, t], old[i, t])).detach()
        weight = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
        out[i, t] = -weight * float(adv[i, t]) * lp[i, t]
    return out


def geo_mean(lp, old, adv, mask, clip_low=0.4, clip_high=0.4) -> dict:
    out = {}
    for i, ts in _rows(mask).items():
        clipped_sum = 0.0
        for t in ts:
            a, lr = float(adv[i, t]), _log_ratio(lp[i, t], old[i, t])
            sign = (a > 0) - (a < 0)
            pessimistic = torch.minimum(sign * lr, sign * torch.clamp(lr, -clip_low, clip_high))
            clipped_sum = clipped_sum + sign * pessimistic
        seq_ratio = torch.exp(clipped_sum / len(ts))
        seq_adv = sum(float(adv[i, t]) for t in ts) / len(ts)
        for t in ts:
            out[i, t] = -seq_adv * seq_ratio
    return out


def covariances(lp, adv, mask) -> dict:
    cells = valid_positions(mask)
    mean_a = sum(float(adv[c]) for c in cells) / len(cells)
    mean_lp = sum(float(lp[c].detach()) for c in cells) / len(cells)
    return {c: (float(adv[c]) - mean_a) * (float(lp[c].detach()) - mean_lp) for c in cells}


def kl_cov(lp, old, adv, mask, kl_cov_ratio=2e-4, kl_coef=1.0) -> dict:
    cov = covariances(lp, adv, mask)
    count = max(int(len(cov) * kl_cov_ratio), 1)
    top = set(sorted(cov, key=cov.get, reverse=True)[:count])
    out = {}
    for i, t in cov:
        lr = _log_ratio(lp[i, t], old[i, t])
        out[i, t] = -float(adv[i, t]) * torch.exp(lr)
        if (i, t) in top:
            out[i, t] = out[i, t] + kl_coef * lr.abs()
    return out


def geo_mean_sequence_weights(weights, mask) -> dict[int, float]:
    """W_i = exp(sum_t log(w_t + 1e-10) / (|y_i| + 1e-8)) over each row's valid tokens."""
    return {
        i: math.exp(
            math.fsum(math.log(float(weights[i, t]) + 1e-10) for t in ts) / (len(ts) + 1e-8)
        )
        for i, ts in _rows(mask).items()
    }


def geo_mean_weighted(lp, old, adv, mask, weights, clip_low=0.4, clip_high=0.4) -> Tensor:
    """The GMPO loss with importance weights, -mean_i W_i Abar_i R_i, as a 0-dim tensor
    (mean over the rows with at least one valid token)."""
    per_token = geo_mean(lp, old, adv, mask, clip_low, clip_high)
    seq_weights = geo_mean_sequence_weights(weights, mask)
    rows = _rows(mask)
    return sum(seq_weights[i] * per_token[i, ts[0]] for i, ts in rows.items()) / len(rows)
