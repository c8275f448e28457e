"""Pieces every policy loss starts from: clean inputs, the importance ratio, ppo_kl."""

from dataclasses import dataclass

import torch
from torch import Tensor

from ascent.algos.masking import as_bool, keep_valid, masked_mean
from ascent.algos.types import PolicyLossInputs

LOG_RATIO_BOUND = 20.0  # exp(20) ~ 5e8: far outside any clip range, still finite in fp32


@dataclass(frozen=True)
class CleanInputs:
    """Policy-loss inputs with masked positions replaced by 0 (so they cannot leak NaN)."""

    log_probs: Tensor
    old_log_probs: Tensor
    advantages: Tensor
    mask: Tensor  # bool
    log_ratio: Tensor  # clamp(lp_new - lp_old, -20, 20)

    @property
    def ratio(self) -> Tensor:
        return torch.exp(self.log_ratio)

    def ppo_kl(self) -> Tensor:
        """masked_mean(lp_old - lp_new): the approximate KL of the update, a metric."""
        return masked_mean(-self.log_ratio.detach(), self.mask)

    def fraction(self, condition: Tensor) -> Tensor:
        """Share of valid tokens where ``condition`` holds, a metric."""
        return masked_mean(condition.float(), self.mask)


def clean(inputs: PolicyLossInputs) -> CleanInputs:
    """Select the valid tokens of every input, then form the clamped log-ratio."""
    mask = as_bool(inputs.response_mask)
    log_probs = keep_valid(inputs.log_probs, mask)
    old_log_probs = keep_valid(inputs.old_log_probs, mask).detach()
    advantages = keep_valid(inputs.advantages, mask).detach()
    log_ratio = (log_probs - old_log_probs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return CleanInputs(log_probs, old_log_probs, advantages, mask, log_ratio)


def masked(per_token: Tensor, mask: Tensor) -> Tensor:
    """The loss matrix with exact zeros outside the mask."""
    return keep_valid(per_token, mask)
