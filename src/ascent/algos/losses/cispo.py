"""CISPO, clipped importance-sampling-weight policy optimisation (MiniMax-M1, arXiv:2506.13585).

    L = -sg(clip(ratio, 1 - clip_low, 1 + clip_high)) * A * lp_new

The ratio is clipped as a *weight* under stop-gradient instead of clipping the surrogate, so a
clipped token still contributes gradient. The paper sets no lower bound (``clip_low=1.0``
makes the lower bound 0) and tunes only the upper one. Metrics: pg_clipfrac (share of tokens
whose weight was clipped), ppo_kl.
"""

from ascent.algos.losses.common import clean, masked
from ascent.algos.types import PolicyLossInputs, TokenLoss


def cispo(inputs: PolicyLossInputs, *, clip_low: float = 1.0, clip_high: float = 0.28) -> TokenLoss:
    """Per-token CISPO loss."""
    x = clean(inputs)
    ratio = x.ratio.detach()
    weight = ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = -weight * x.advantages * x.log_probs
    metrics = {"pg_clipfrac": x.fraction(weight != ratio), "ppo_kl": x.ppo_kl()}
    return TokenLoss(masked(loss, x.mask), metrics)
