"""Generalised advantage estimation (PPO), with the VAPO options.

Backward scan over t = T-1 .. 0 that skips masked tokens, so the TD chain jumps over tool
output and padding:

    delta_t = r_t + gamma * V_next - V_t
    A_t     = delta_t + gamma * lam * A_next
    (V_next, A_next) advance to (V_t, A_t) only where m_t = 1.

returns = A(critic_lam) + V (the critic's regression target); advantages =
masked_whiten(A(lam)) over all valid tokens of the batch. Both are zero outside the mask.

VAPO (arXiv:2504.05118): the critic and the actor may use different lambdas (``critic_lam``,
VAPO uses 1.0 for the critic), and the actor's lambda may adapt to the response length,
lam_i = 1 - 1 / (alpha * |y_i|) (``length_adaptive_alpha``, VAPO uses 0.05), clipped to [0, 1].
"""

import torch
from torch import Tensor

from ascent.algos.masking import as_bool, at_least_float32, keep_valid, masked_whiten
from ascent.algos.needs import needs
from ascent.algos.types import AdvantageInputs, Advantages


@needs(values=True)
@torch.no_grad()
def gae(
    inputs: AdvantageInputs,
    *,
    gamma: float = 1.0,
    lam: float = 1.0,
    critic_lam: float | None = None,
    length_adaptive_alpha: float | None = None,
) -> Advantages:
    """GAE advantages and returns; needs ``inputs.values``."""
    mask = as_bool(inputs.response_mask)
    rewards = at_least_float32(keep_valid(inputs.token_rewards, mask))
    values = keep_valid(inputs.require("values", "gae"), mask).to(rewards.dtype)
    batch = mask.shape[0]

    if length_adaptive_alpha is not None:
        lengths = mask.sum(dim=-1).to(rewards.dtype)
        actor_lam = (1 - 1 / (length_adaptive_alpha * lengths).clamp(min=1e-8)).clamp(0, 1)
    else:
        actor_lam = torch.full((batch,), lam, dtype=rewards.dtype, device=mask.device)
    actor_advantages = gae_scan(rewards, values, mask, gamma, actor_lam)

    if critic_lam is None and length_adaptive_alpha is None:
        critic_advantages = actor_advantages
    else:
        critic_lambda = lam if critic_lam is None else critic_lam
        critic_lambdas = torch.full(
            (batch,), critic_lambda, dtype=rewards.dtype, device=mask.device
        )
        critic_advantages = gae_scan(rewards, values, mask, gamma, critic_lambdas)

    returns = keep_valid(critic_advantages + values, mask)
    return Advantages(advantages=masked_whiten(actor_advantages, mask), returns=returns)


def gae_scan(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: Tensor) -> Tensor:
    """Raw (unwhitened) GAE, (B, T) inputs with clean masked positions, lam (B,) -> (B, T)."""
    next_value = torch.zeros_like(rewards[:, 0])
    next_advantage = torch.zeros_like(rewards[:, 0])
    advantages = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        valid = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        next_value = torch.where(valid, values[:, t], next_value)
        next_advantage = torch.where(valid, advantage, next_advantage)
        advantages[:, t] = torch.where(valid, advantage, 0.0)
    return advantages
