"""Plain REINFORCE policy gradient: L = -A * lp_new.

For on-policy estimators that need no ratio (gpg, remax, or any single-update setup).
Metric: ppo_kl, which should stay ~0 when the batch is truly on-policy.
"""

from ascent.algos.losses.common import clean, masked
from ascent.algos.types import PolicyLossInputs, TokenLoss


def reinforce(inputs: PolicyLossInputs) -> TokenLoss:
    """Per-token REINFORCE loss."""
    x = clean(inputs)
    return TokenLoss(masked(-x.advantages * x.log_probs, x.mask), {"ppo_kl": x.ppo_kl()})
