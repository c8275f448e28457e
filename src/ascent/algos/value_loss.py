"""Clipped value loss for the critic (PPO).

    v_clip = clamp(v_pred, v_old - clip, v_old + clip)
    L_t    = 0.5 * max((v_pred - R)^2, (v_clip - R)^2)

returned per token for aggregation (so the loss is 0.5 * agg(max(...))). ``clip=None``
disables clipping. Metrics: vf_clipfrac (share of valid tokens where the clipped error is the
larger), vpred_mean.
"""

import torch
from torch import Tensor

from ascent.algos.masking import as_bool, keep_valid, masked_mean
from ascent.algos.types import TokenLoss


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    *,
    clip: float | None = 0.5,
) -> TokenLoss:
    """Per-token clipped value loss; ``values`` (B, T) carries the gradient."""
    mask = as_bool(response_mask)
    predicted = keep_valid(values, mask)
    old = keep_valid(old_values, mask).detach()
    target = keep_valid(returns, mask).detach()
    error = (predicted - target).square()
    if clip is None:
        loss, clipped_larger = error, torch.zeros_like(mask)
    else:
        clipped = torch.clamp(predicted, old - clip, old + clip)
        clipped_error = (clipped - target).square()
        loss, clipped_larger = torch.maximum(error, clipped_error), clipped_error > error
    metrics = {
        "vf_clipfrac": masked_mean(clipped_larger.float(), mask),
        "vpred_mean": masked_mean(predicted.detach(), mask),
    }
    return TokenLoss(keep_valid(0.5 * loss, mask), metrics)
