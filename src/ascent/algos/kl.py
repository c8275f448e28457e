"""KL estimators between the policy and the reference, per token (Schulman's k1/k2/k3).

With x = lp - lp_ref (log-probs of the sampled tokens under the policy and the reference):

    k1  = x
    abs = |x|
    k2  = x^2 / 2
    k3  = exp(-x) + x - 1,  with -x clamped to [-20, 20] and the result clamped to [-10, 10]

k3 is unbiased for KL(pi || ref) with low variance and always >= 0. The "+" variants
(``k1+``, ``k3+``) have the forward value of the base estimator and the gradient of k2
(straight-through): value = base.detach() + k2 - k2.detach(). k2's gradient is the unbiased
gradient of KL(pi || ref) when used as a loss, which k1 and k3 are not.
verl's names are accepted as aliases: kl = k1, mse = k2, low_var_kl = k3, low_var_kl+ = k3+.
"""

from collections.abc import Callable

import torch
from torch import Tensor

from ascent.algos.masking import as_bool, keep_valid, masked_mean


def _k1(x: Tensor) -> Tensor:
    return x


def _abs(x: Tensor) -> Tensor:
    return x.abs()


def _k2(x: Tensor) -> Tensor:
    return 0.5 * x.square()


def _k3(x: Tensor) -> Tensor:
    neg = (-x).clamp(-20.0, 20.0)
    return (torch.exp(neg) - neg - 1).clamp(-10.0, 10.0)


_BASE: dict[str, Callable[[Tensor], Tensor]] = {"k1": _k1, "abs": _abs, "k2": _k2, "k3": _k3}
_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3", "low_var_kl+": "k3+", "kl+": "k1+"}
KL_ESTIMATORS: tuple[str, ...] = ("k1", "abs", "k2", "k3", "k1+", "k3+")


def kl_estimator_name(estimator: str) -> str:
    """The canonical name of ``estimator`` (one of KL_ESTIMATORS; verl's names are aliases);
    ValueError for an unknown one."""
    name = _ALIASES.get(estimator, estimator)
    if name not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")
    return name


def kl_estimate(log_probs: Tensor, ref_log_probs: Tensor, mask: Tensor, estimator: str) -> Tensor:
    """Per-token KL estimate, (B, T), zero outside the mask; differentiable in ``log_probs``."""
    name = kl_estimator_name(estimator)
    straight_through = name.endswith("+")
    x = keep_valid(log_probs, mask) - keep_valid(ref_log_probs, mask).detach()
    value = _BASE[name.removesuffix("+")](x)
    if straight_through:
        surrogate = _k2(x)
        value = value.detach() + surrogate - surrogate.detach()
    return keep_valid(value, mask)


def kl_penalty_in_reward(
    token_scores: Tensor,
    log_probs: Tensor,
    ref_log_probs: Tensor,
    mask: Tensor,
    *,
    beta: float,
    estimator: str = "k1",
) -> tuple[Tensor, dict[str, Tensor]]:
    """KL in the reward: r_t = score_t - beta * kl_t on valid tokens (0 elsewhere).

    ``log_probs`` are those of the policy that collected the batch. Returns the rewards and
    metrics ``kl`` (the batch mean over sequences of each sequence's token-mean KL, the value a
    KL controller is updated with) and ``kl_coef``.
    """
    mask = as_bool(mask)
    with torch.no_grad():
        kl = kl_estimate(log_probs, ref_log_probs, mask, estimator)
        rewards = keep_valid(token_scores - beta * kl, mask)
        per_sequence = masked_mean(kl, mask, dim=-1)
    metrics = {"kl": per_sequence.mean(), "kl_coef": torch.tensor(float(beta))}
    return rewards, metrics
