"""Importance weights that correct for the rollout engine's log-probs differing from the
trainer's (different kernels, precision, or a stale policy), and the mismatch metrics.

    log_rho_t = lp_train_t - lp_roll_t      (lp_train = lp_old, or lp_new when old log-probs
                                             are not recomputed)
    token level:    rho_t = exp(clamp(log_rho_t, -20, 20))
    sequence level: rho_i = exp(clamp(sum_t m log_rho_t, -20, 20)), the same on all tokens of i

mode ``truncate`` (TIS): weight = min(rho, upper).
mode ``mask`` (MIS / IcePop): weight = 1 where lower <= rho <= upper, else 0.
mode ``none``: weight = 1 (metrics only).
Weights are detached, (B, T), zero outside the mask; ``aggregate(..., weights=w)`` multiplies
them into the policy loss matrix, token by token, or as one geometric-mean weight per sequence
for losses that ask for it (geo_mean; ``TokenLoss.weighting``).

Metrics (always, whatever the mode), with KL(roll || train) estimated from rollout samples:
mismatch_k1 = mean(lp_roll - lp_train), mismatch_k3 = mean(rho - 1 - log rho) over valid
tokens, mismatch_max_abs (largest |log rho| on a valid token), truncated_frac (share of valid
tokens whose weight was truncated) and masked_frac (share of valid tokens masked out); the
ratio's spread, ratio_{mean,std,min,max} of rho (at the chosen level, before truncation or
masking) over valid tokens, std the population one (how far off-policy a stale batch is).
"""

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from ascent.algos.masking import as_bool, at_least_float32, keep_valid, masked_mean

LOG_RHO_BOUND = 20.0


@dataclass(frozen=True)
class RolloutCorrection:
    """Weights (B, T) and the metrics that describe the mismatch."""

    weights: Tensor
    metrics: dict[str, Tensor]


@torch.no_grad()
def rollout_correction(
    train_log_probs: Tensor,
    rollout_log_probs: Tensor,
    response_mask: Tensor,
    *,
    level: Literal["token", "sequence"] = "token",
    mode: Literal["none", "truncate", "mask"] = "truncate",
    lower: float = 0.5,
    upper: float = 2.0,
) -> RolloutCorrection:
    """Compute rollout-correction weights and mismatch metrics."""
    mask = as_bool(response_mask)
    log_rho = at_least_float32(
        keep_valid(train_log_probs, mask) - keep_valid(rollout_log_probs, mask)
    )
    token_log_rho = log_rho.clamp(-LOG_RHO_BOUND, LOG_RHO_BOUND)

    if level == "token":
        rho = torch.exp(token_log_rho)
    elif level == "sequence":
        sequence_log_rho = log_rho.sum(dim=-1, keepdim=True).clamp(-LOG_RHO_BOUND, LOG_RHO_BOUND)
        rho = torch.exp(sequence_log_rho).expand_as(log_rho)
    else:
        raise ValueError(f"rollout correction level must be 'token' or 'sequence', got {level!r}")

    truncated = torch.zeros_like(mask)
    outside = torch.zeros_like(mask)
    if mode == "none":
        weights = torch.ones_like(rho)
    elif mode == "truncate":
        truncated = rho > upper
        weights = rho.clamp(max=upper)
    elif mode == "mask":
        outside = (rho < lower) | (rho > upper)
        weights = (~outside).to(rho.dtype)
    else:
        raise ValueError(f"rollout correction mode must be none, truncate or mask, got {mode!r}")

    metrics = {
        "mismatch_k1": masked_mean(-token_log_rho, mask),
        "mismatch_k3": masked_mean(torch.exp(token_log_rho) - 1 - token_log_rho, mask),
        "mismatch_max_abs": keep_valid(token_log_rho.abs(), mask).amax()
        if mask.any()
        else torch.zeros(()),
        "truncated_frac": masked_mean(truncated.float(), mask),
        "masked_frac": masked_mean(outside.float(), mask),
        **_spread(rho[mask]),
    }
    return RolloutCorrection(weights=keep_valid(weights, mask), metrics=metrics)


def _spread(ratios: Tensor) -> dict[str, Tensor]:
    """Mean, population std, min and max of the valid tokens' ratios (zeros when none)."""
    if ratios.numel() == 0:
        return {f"ratio_{name}": torch.zeros(()) for name in ("mean", "std", "min", "max")}
    return {
        "ratio_mean": ratios.mean(),
        "ratio_std": ratios.std(correction=0),
        "ratio_min": ratios.min(),
        "ratio_max": ratios.max(),
    }
