"""GSPO, group sequence policy optimisation (arXiv:2507.18071).

The importance ratio is per sequence, the geometric mean of the token ratios:

    log s_i = sum_t m (lp_new - lp_old) / |y_i|

and each token uses  lp_new - sg(lp_new) + sg(log s_i)  (clamped above at 10) as its log-ratio:
its value is log s_i, but its gradient is that of the token's own log-prob, so the sequence
gradient is s_i * mean_t grad lp_t as in the paper. Clipped like ppo (no dual clip) with the
paper's tiny ranges (3e-4 / 4e-4). The aggregation is fixed to seq-mean-token-mean.
Metrics: pg_clipfrac, ppo_kl.
"""

import torch

from ascent.algos.losses.common import clean, masked
from ascent.algos.types import PolicyLossInputs, TokenLoss


def gspo(inputs: PolicyLossInputs, *, clip_low: float = 3e-4, clip_high: float = 4e-4) -> TokenLoss:
    """Per-token GSPO loss (aggregate with seq-mean-token-mean)."""
    x = clean(inputs)
    lengths = x.mask.sum(dim=-1).clamp(min=1)
    log_seq_ratio = (x.log_probs - x.old_log_probs).sum(dim=-1) / lengths  # (B,)
    # Detached terms added last: adding sg(lp) to lp first would lose precision (verl #2775).
    log_ratio = x.log_probs - x.log_probs.detach() + log_seq_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(log_ratio.clamp(max=10.0))
    unclipped = -x.advantages * ratio
    clipped = -x.advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    metrics = {"pg_clipfrac": x.fraction(clipped > unclipped), "ppo_kl": x.ppo_kl()}
    return TokenLoss(masked(loss, x.mask), metrics, aggregation="seq-mean-token-mean")
