"""Clip-Cov (arXiv:2505.22617): PPO, with gradient detached from a few high-covariance tokens.

Among valid tokens that the PPO clip did not already clip and whose centred covariance
cov_t = (A_t - mean A)(lp_t - mean lp) lies in (cov_lb, cov_ub), a random subset of
max(1, floor(clip_cov_ratio * N_valid)) tokens (fewer if fewer qualify) gets zero loss; every
other token has the clipped PPO loss max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high)),
without dual clip, as in the paper. Pass a ``torch.Generator`` for reproducible selection.
The means and the budget are those of the micro-batch in hand (as in the paper and verl),
so unlike the other losses the selection depends on how a mini-batch is cut.
Metrics: pg_clipfrac (PPO clip), cov_dropped_frac (share of valid tokens zeroed), ppo_kl.
"""

import torch

from ascent.algos.losses.common import clean, masked
from ascent.algos.losses.covariance import centred_covariance
from ascent.algos.types import PolicyLossInputs, TokenLoss


def clip_cov(
    inputs: PolicyLossInputs,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    clip_cov_ratio: float = 2e-4,
    cov_lb: float = 1.0,
    cov_ub: float = 5.0,
    generator: torch.Generator | None = None,
) -> TokenLoss:
    """Per-token Clip-Cov loss."""
    x = clean(inputs)
    ratio = x.ratio
    unclipped = -x.advantages * ratio
    clipped = -x.advantages * ratio.clamp(1 - clip_low, 1 + clip_high)
    ppo_clipped = clipped > unclipped
    covariance = centred_covariance(x)
    eligible = x.mask & ~ppo_clipped & (covariance > cov_lb) & (covariance < cov_ub)

    candidates = eligible.flatten().nonzero().squeeze(-1)
    budget = max(int(clip_cov_ratio * int(x.mask.sum())), 1)
    order = torch.randperm(candidates.numel(), generator=generator).to(candidates.device)
    dropped = torch.zeros(x.mask.numel(), dtype=torch.bool, device=x.mask.device)
    dropped[candidates[order[:budget]]] = True
    dropped = dropped.view_as(x.mask)

    loss = torch.where(dropped, 0.0, torch.maximum(unclipped, clipped))
    metrics = {
        "pg_clipfrac": x.fraction(ppo_clipped),
        "cov_dropped_frac": x.fraction(dropped),
        "ppo_kl": x.ppo_kl(),
    }
    return TokenLoss(masked(loss, x.mask), metrics)
