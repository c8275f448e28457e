"""PPO clipped surrogate (arXiv:1707.06347) with dual-clip (arXiv:1912.09729) and DAPO's
clip-higher (arXiv:2503.14476).

    ratio = exp(clamp(lp_new - lp_old, -20, 20))
    L     = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))
    L     = min(L, -A * dual_clip)   where A < 0   (bounds the loss of a very off-policy token)

clip_high > clip_low is clip-higher (DAPO: 0.2 / 0.28). ``dual_clip=None`` disables it.
Metrics: pg_clipfrac (share of tokens where the clipped term is active), pg_clipfrac_lower
(share where the dual clip is active), ppo_kl = masked_mean(lp_old - lp_new).
"""

import torch

from ascent.algos.losses.common import clean, masked
from ascent.algos.types import PolicyLossInputs, TokenLoss


def ppo(
    inputs: PolicyLossInputs,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
) -> TokenLoss:
    """Per-token clipped PPO loss."""
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"ppo dual_clip must be > 1 (got {dual_clip}); use None to disable it")
    x = clean(inputs)
    advantages, ratio = x.advantages, x.ratio
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    metrics = {"pg_clipfrac": x.fraction(clipped > unclipped), "ppo_kl": x.ppo_kl()}
    if dual_clip is not None:
        bound = -advantages * dual_clip
        negative = advantages < 0
        metrics["pg_clipfrac_lower"] = x.fraction(negative & (loss > bound))
        loss = torch.where(negative, torch.minimum(loss, bound), loss)
    return TokenLoss(per_token=masked(loss, x.mask), metrics=metrics)
