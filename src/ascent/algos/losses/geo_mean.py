"""GMPO, geometric-mean policy optimisation (arXiv:2507.20673).

Token log-ratios are clipped in log space, sign-aware (the pessimistic side for the sign of
the advantage), and combined into a sequence ratio by their geometric mean:

    l_t   = clamp(lp_new - lp_old, -20, 20)
    c_t   = sign(A_t) * min(sign(A_t) * l_t, sign(A_t) * clamp(l_t, -clip_low, clip_high))
    R_i   = exp(sum_t m c_t / |y_i|),   Abar_i = sum_t m A_t / |y_i|
    loss  = -mean_i (W_i * Abar_i * R_i)

W_i = 1 without rollout correction. With rollout-correction weights w (B, T), detached, the
sequence is weighted by their geometric mean, as its ratio R_i is (verl does the same):

    W_i   = exp(sum_t m log(w_t + 1e-10) / (|y_i| + 1e-8))

A constant weight per row (sequence-level correction) gives W_i = w_i (to ~1e-8 relative).
A token with weight 0 (masked IS) is not removed: it still counts in R_i and Abar_i, and
shrinks W_i by the factor 1e-10^(1/|y_i|), about 0.003 for 4 tokens but 0.98 for 1000; use
sequence-level masking to drop a whole response (W_i ~ 1e-10).

Represented as a per-token matrix holding -Abar_i * R_i on every valid token of row i,
aggregated seq-mean-token-mean, with ``weighting="sequence_geometric_mean"`` so that
``aggregate`` multiplies every token of row i by W_i. That gives exactly the per-sequence
mean above and stays invariant to micro-batching (W_i depends on row i alone). Mean over the
sequences with at least one valid token (N_seq). Defaults follow the paper's (e^-0.4, e^0.4)
range. Metrics: pg_clipfrac (share of tokens whose log-ratio was clipped), ppo_kl.
"""

import torch

from ascent.algos.losses.common import clean, masked
from ascent.algos.types import PolicyLossInputs, TokenLoss


def geo_mean(
    inputs: PolicyLossInputs, *, clip_low: float = 0.4, clip_high: float = 0.4
) -> TokenLoss:
    """Per-token representation of the GMPO sequence loss."""
    x = clean(inputs)
    sign = torch.sign(x.advantages)
    bounded = x.log_ratio.clamp(-clip_low, clip_high)
    clipped_log_ratio = sign * torch.minimum(sign * x.log_ratio, sign * bounded)
    lengths = x.mask.sum(dim=-1).clamp(min=1)
    seq_ratio = torch.exp(masked(clipped_log_ratio, x.mask).sum(dim=-1) / lengths)  # (B,)
    seq_advantage = x.advantages.sum(dim=-1) / lengths  # (B,)
    loss = (-seq_advantage * seq_ratio).unsqueeze(-1).expand_as(x.log_probs)
    was_clipped = (sign != 0) & (clipped_log_ratio != x.log_ratio)
    metrics = {
        "pg_clipfrac": x.fraction(was_clipped),
        "ppo_kl": x.ppo_kl(),
    }
    return TokenLoss(
        masked(loss, x.mask),
        metrics,
        aggregation="seq-mean-token-mean",
        weighting="sequence_geometric_mean",
    )
