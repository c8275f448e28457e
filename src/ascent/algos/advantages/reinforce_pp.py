"""REINFORCE++ (arXiv:2501.03262): discounted returns whitened over the batch.

    G_t = r_t + gamma * G_{t+1}, the recursion advancing only over masked-in tokens
    advantages = masked_whiten(G) * m;  returns = G * m

Skipping masked tokens (rather than resetting the return there) lets an outcome reward reach
the tokens before a tool call. For right-padded responses without tool tokens this equals
verl's ``reinforce_plus_plus`` exactly; with interior masked tokens verl resets the return at
them, which cuts the credit chain, and ascent does not.
"""

import torch

from ascent.algos.masking import as_bool, at_least_float32, keep_valid, masked_whiten
from ascent.algos.types import AdvantageInputs, Advantages


@torch.no_grad()
def reinforce_pp(inputs: AdvantageInputs, *, gamma: float = 1.0) -> Advantages:
    """Whitened discounted returns."""
    mask = as_bool(inputs.response_mask)
    rewards = at_least_float32(keep_valid(inputs.token_rewards, mask))
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = torch.where(mask[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(mask[:, t], running, 0.0)
    return Advantages(advantages=masked_whiten(returns, mask), returns=returns)
