"""SPPO, self-play preference optimisation (arXiv:2405.00675): a squared regression of each
sequence's log-ratio against the old policy onto its centred win rate.

With target a_i = eta * (P_i - 1/2) (the ``sppo`` estimator writes it into every valid
token's advantage; see ``ascent.algos.advantages.sppo``):

    L_i = (sum_t m (lp_new - lp_old) - a_i)^2

pi_old is the policy that sampled the step (pi_t of the paper's iteration t). Each valid
token of row i carries L_i, and the aggregation is fixed to seq-mean-token-mean, so the
actor's loss is the mean of L_i over sequences. On the batch's first update (lp_new =
lp_old) the gradient is -2 a_i grad sum_t lp_t: REINFORCE with advantage 2 a_i; later
updates pull each log-ratio towards its target instead of past it, which bounds how far the
policy moves from pi_t. Metrics: ppo_kl, and ``sppo_log_ratio``, the mean sum_t log-ratio.
"""

from ascent.algos.losses.common import clean, masked
from ascent.algos.types import PolicyLossInputs, TokenLoss


def sppo(inputs: PolicyLossInputs) -> TokenLoss:
    """Per-token SPPO loss (each row's squared error on each of its tokens)."""
    x = clean(inputs)
    lengths = x.mask.sum(dim=-1).clamp(min=1)
    log_ratio = (x.log_probs - x.old_log_probs).sum(dim=-1)  # (B,): masked tokens are 0
    target = x.advantages.sum(dim=-1) / lengths  # a_i, the same on each valid token
    per_row = (log_ratio - target) ** 2
    metrics = {"ppo_kl": x.ppo_kl(), "sppo_log_ratio": log_ratio.detach().mean()}
    per_token = per_row.unsqueeze(-1).expand_as(x.log_probs)
    return TokenLoss(masked(per_token, x.mask), metrics, aggregation="seq-mean-token-mean")
