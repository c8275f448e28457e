"""The Tinker API's built-in losses, per datum, summed (never averaged: the client weighs
its examples itself, e.g. weights that sum to 1 per example for a mean).

For a datum of N positions, lp_i = log p(target_i | tokens before and at i) under the
trained model, and the loss inputs (N,) each:

    cross_entropy         L = - sum_i w_i lp_i                 (inputs target_tokens, weights)
    importance_sampling   L = - sum_i exp(lp_i - q_i) A_i      (target_tokens, logprobs q,
                                                                advantages A)
    ppo                   L = - sum_i min(r_i A_i, clip(r_i, lo, hi) A_i), r_i = exp(lp_i - q_i),
                          lo, hi: loss_fn_config clip_low_threshold (0.8), clip_high_threshold
                          (1.2)
    cispo                 L = - sum_i sg(clip(r_i, lo, hi)) A_i lp_i (the clipped ratio is a
                          weight, so a clipped token still has a gradient); lo, hi as for ppo

Each reports ``loss:sum`` (the client sums it over the chunks of one call).
"""

from collections.abc import Callable

import torch
from torch import Tensor

from ascent.service.wire import WireError

# (log-probs (N,), loss inputs, config) -> the datum's loss (a scalar)
Loss = Callable[[Tensor, dict[str, Tensor], dict], Tensor]


def cross_entropy(log_probs: Tensor, inputs: dict[str, Tensor], config: dict) -> Tensor:
    weights = inputs.get("weights")
    weights = torch.ones_like(log_probs) if weights is None else weights
    return -(log_probs * weights).sum()


def importance_sampling(log_probs: Tensor, inputs: dict[str, Tensor], config: dict) -> Tensor:
    ratio = torch.exp(log_probs - inputs["logprobs"])
    return -(ratio * inputs["advantages"]).sum()


def ppo(log_probs: Tensor, inputs: dict[str, Tensor], config: dict) -> Tensor:
    ratio = torch.exp(log_probs - inputs["logprobs"])
    low, high = clip_range(config)
    advantages = inputs["advantages"]
    return -torch.minimum(ratio * advantages, ratio.clamp(low, high) * advantages).sum()


def cispo(log_probs: Tensor, inputs: dict[str, Tensor], config: dict) -> Tensor:
    ratio = torch.exp(log_probs.detach() - inputs["logprobs"])
    low, high = clip_range(config)
    return -(ratio.clamp(low, high) * inputs["advantages"] * log_probs).sum()


def clip_range(config: dict) -> tuple[float, float]:
    """(lo, hi) of the ratio's clip from ``loss_fn_config``."""
    return float(config.get("clip_low_threshold", 0.8)), float(
        config.get("clip_high_threshold", 1.2)
    )


LOSSES: dict[str, tuple[Loss, tuple[str, ...]]] = {
    "cross_entropy": (cross_entropy, ("target_tokens",)),
    "importance_sampling": (importance_sampling, ("target_tokens", "logprobs", "advantages")),
    "ppo": (ppo, ("target_tokens", "logprobs", "advantages")),
    "cispo": (cispo, ("target_tokens", "logprobs", "advantages")),
}


def numeric_config(config: dict | None) -> dict[str, float]:
    """``loss_fn_config`` as numbers, checked before any rank computes (a rank that failed
    alone would leave the others waiting in a collective)."""
    numbers = {}
    for key, value in (config or {}).items():
        try:
            numbers[key] = float(value)
        except (TypeError, ValueError):
            raise WireError(f"loss_fn_config[{key!r}] = {value!r} is not a number") from None
    return numbers


def loss_of(name: str) -> tuple[Loss, tuple[str, ...]]:
    """The loss ``name`` and the inputs it needs; ``WireError`` for one not served."""
    if name not in LOSSES:
        raise WireError(
            f"loss_fn {name!r} is not served; use one of {sorted(LOSSES)} (e.g. the cookbook's "
            "rl_loop with loss_fn=importance_sampling)"
        )
    return LOSSES[name]
