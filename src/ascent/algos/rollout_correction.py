"""Importance weights that correct for the rollout engine's log-probs differing from the
trainer's (different kernels, precision, or a stale policy), and the mismatch metrics.

    log_rho_t = lp_train_t - lp_roll_t      (lp_train = lp_old, or lp_new when old log-probs
                                             are not recomputed)
    token level:     rho_t = exp(clamp(log_rho_t, -20, 20))
    sequence level:  rho_i = exp(clamp(sum_t m log_rho_t, -20, 20)), the same on all tokens of i
    geometric level: rho_i = exp(clamp(sum_t m log_rho_t / n_i, -20, 20)), n_i = sum_t m, the
                     geometric mean of the token ratios, the same on all tokens of i

mode ``truncate`` (TIS): weight = min(rho, upper).
mode ``mask`` (MIS / IcePop): weight = 1 where lower <= rho <= upper, else 0. At the geometric
level this is geometric-mean rejection (verl's geometric rollout_rs): a sequence whose geometric
mean ratio leaves [lower, upper] is dropped whole; its length does not move the bounds.
modes ``reject_k1``, ``reject_k3``, ``reject_max_abs``: weight 0 on every token of a sequence
whose mismatch statistic exceeds ``reject_above``, 1 on the others, with (unclamped log_rho)

    k1_i      = sum_t m (-log_rho_t) / n_i                 mean log(pi_roll / pi_train)
    k3_i      = sum_t m (rho_t - 1 - log_rho_t) / n_i      mean k3, rho_t = exp(log_rho_t)
    max_abs_i = max_t m |log_rho_t|                        the worst token

(the per-sequence values of the mismatch metrics below). k1 is signed: a sequence the trainer
finds likelier than the rollout did (k1_i < 0) is never rejected by it; k3 and max_abs are
two-sided. The level does not enter these modes (it sets the ratio metrics only).
mode ``none``: weight = 1 (metrics only).
A NaN ratio or statistic is outside its bounds (masked or rejected). A row with no valid token
has no weight and counts in no share.
Weights are detached, (B, T), zero outside the mask; ``aggregate(..., weights=w)`` multiplies
them into the policy loss matrix, token by token, or as one geometric-mean weight per sequence
for losses that ask for it (geo_mean; ``TokenLoss.weighting``). Masked-out tokens stay in the
loss's denominators (a rejected token counts as a token whose loss is 0), as for mode mask.

Metrics (always, whatever the mode), with KL(roll || train) estimated from rollout samples:
mismatch_k1 = mean(lp_roll - lp_train), mismatch_k3 = mean(rho - 1 - log rho) over valid
tokens, mismatch_max_abs (largest |log rho| on a valid token), truncated_frac (share of valid
tokens whose weight was truncated), masked_frac (share of valid tokens masked out or rejected)
and masked_seq_frac (share of the rows with a valid token that lost all of them: rejected or
masked sequences, or a token-level mask that took every token); the ratio's spread,
ratio_{mean,std,min,max} of rho (at the chosen level, before truncation or masking) over valid
tokens, std the population one (how far off-policy a stale batch is).
"""

from dataclasses import dataclass
from typing import Literal, get_args

import torch
from torch import Tensor

from ascent.algos.masking import as_bool, at_least_float32, keep_valid, masked_mean

LOG_RHO_BOUND = 20.0
Level = Literal["token", "sequence", "geometric"]
Mode = Literal["none", "truncate", "mask", "reject_k1", "reject_k3", "reject_max_abs"]
REJECT_MODES = tuple(mode for mode in get_args(Mode) if mode.startswith("reject_"))


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
    level: Level = "token",
    mode: Mode = "truncate",
    lower: float = 0.5,
    upper: float = 2.0,
    reject_above: float | None = None,
) -> RolloutCorrection:
    """Compute rollout-correction weights and mismatch metrics."""
    mask = as_bool(response_mask)
    log_rho = at_least_float32(
        keep_valid(train_log_probs, mask) - keep_valid(rollout_log_probs, mask)
    )
    token_log_rho = log_rho.clamp(-LOG_RHO_BOUND, LOG_RHO_BOUND)
    rho = _ratio(log_rho, mask, level)

    truncated = torch.zeros_like(mask)
    outside = torch.zeros_like(mask)
    if mode == "none":
        weights = torch.ones_like(rho)
    elif mode == "truncate":
        truncated = rho > upper
        weights = rho.clamp(max=upper)
    elif mode == "mask":
        outside = ~((rho >= lower) & (rho <= upper)) & mask
        weights = (~outside).to(rho.dtype)
    elif mode in REJECT_MODES:
        if reject_above is None:
            raise ValueError(f"rollout correction mode {mode} needs reject_above (a threshold)")
        keep = _sequence_statistic(log_rho, mask, mode) <= reject_above  # NaN: rejected
        outside = ~keep.unsqueeze(-1) & mask
        weights = (~outside).to(rho.dtype)
    else:
        raise ValueError(f"rollout correction mode must be one of {get_args(Mode)}, got {mode!r}")

    metrics = {
        "mismatch_k1": masked_mean(-token_log_rho, mask),
        "mismatch_k3": masked_mean(torch.exp(token_log_rho) - 1 - token_log_rho, mask),
        "mismatch_max_abs": keep_valid(token_log_rho.abs(), mask).amax()
        if mask.any()
        else torch.zeros(()),
        "truncated_frac": masked_mean(truncated.float(), mask),
        "masked_frac": masked_mean(outside.float(), mask),
        "masked_seq_frac": _whole_rows(outside, mask),
        **_spread(rho[mask]),
    }
    return RolloutCorrection(weights=keep_valid(weights, mask), metrics=metrics)


def _ratio(log_rho: Tensor, mask: Tensor, level: Level) -> Tensor:
    """rho (B, T) at the level: per token, or one value per sequence on all its tokens."""
    if level == "token":
        return torch.exp(log_rho.clamp(-LOG_RHO_BOUND, LOG_RHO_BOUND))
    if level == "sequence":
        per_row = log_rho.sum(dim=-1, keepdim=True)
    elif level == "geometric":
        lengths = mask.sum(dim=-1, keepdim=True).clamp(min=1)
        per_row = log_rho.sum(dim=-1, keepdim=True) / lengths
    else:
        raise ValueError(
            f"rollout correction level must be one of {get_args(Level)}, got {level!r}"
        )
    return torch.exp(per_row.clamp(-LOG_RHO_BOUND, LOG_RHO_BOUND)).expand_as(log_rho)


def _sequence_statistic(log_rho: Tensor, mask: Tensor, mode: str) -> Tensor:
    """k1, k3 or max |log rho| of each sequence (B,), over its valid tokens (0 when none)."""
    if mode == "reject_max_abs":
        return keep_valid(log_rho.abs(), mask).amax(dim=-1)
    # expm1: k3 of a near-agreeing pair (|log rho| ~ 1e-6) is ~1e-12, below exp(x) - 1's
    # rounding in float32.
    per_token = -log_rho if mode == "reject_k1" else torch.expm1(log_rho) - log_rho
    lengths = mask.sum(dim=-1).clamp(min=1)
    return keep_valid(per_token, mask).sum(dim=-1) / lengths


def _whole_rows(outside: Tensor, mask: Tensor) -> Tensor:
    """Share of the rows with a valid token whose valid tokens are all outside (0 if none)."""
    present = mask.any(dim=-1)
    whole = (outside | ~mask).all(dim=-1) & present
    return whole.sum() / present.sum().clamp(min=1)


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
