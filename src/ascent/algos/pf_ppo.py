"""PF-PPO, policy filtration for PPO (arXiv:2409.06957).

Before the update the batch is resampled *with replacement*, sample i drawn with probability
proportional to a weight of its score s_i, so that responses with reliable (extreme) reward
signal are seen more often:

    pow:        w_i = |s_i|^p                 (p = 2 by default)
    max_min:    w_i = 1 if s_i is the batch max or min, else 0
    max_random: w_i = 0.4 if s_i is the batch max, else 0.1 (best-of plus random, as verl)

A small floor (1e-8) keeps all-zero weights samplable. The result is a row index (B,) for
``Batch.index``; pass a ``torch.Generator`` for reproducibility.
"""

from typing import Literal

import torch
from torch import Tensor


def pf_ppo_weights(
    scores: Tensor, *, method: Literal["pow", "max_min", "max_random"] = "pow", power: float = 2.0
) -> Tensor:
    """Unnormalised resampling weights (B,) from sequence scores (B,)."""
    scores = scores.float()
    if method == "pow":
        weights = scores.abs().pow(power)
    elif method == "max_min":
        weights = ((scores == scores.max()) | (scores == scores.min())).float()
    elif method == "max_random":
        weights = torch.where(scores == scores.max(), 0.4, 0.1)
    else:
        raise ValueError(f"unknown PF-PPO method {method!r}; choose pow, max_min or max_random")
    return weights.clamp(min=0) + 1e-8


def pf_ppo_resample(
    scores: Tensor,
    *,
    method: Literal["pow", "max_min", "max_random"] = "pow",
    power: float = 2.0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Row indices (B,) drawn with replacement in proportion to ``pf_ppo_weights``."""
    weights = pf_ppo_weights(scores, method=method, power=power)
    return torch.multinomial(weights, scores.numel(), replacement=True, generator=generator)
