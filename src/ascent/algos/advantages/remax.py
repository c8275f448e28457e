"""ReMax (arXiv:2310.10505): REINFORCE with the greedy response's score as baseline.

    returns_t = sum_{t' >= t} r_t' * m_t'      (reverse cumulative sum)
    A_t       = (returns_t - b_i) * m_t,        b_i = score of the greedy response to prompt i

The trainer generates the greedy response and scores it; it arrives as
``inputs.baseline_scores`` (B,).
"""

import torch

from ascent.algos.masking import as_bool, at_least_float32, keep_valid
from ascent.algos.needs import needs
from ascent.algos.types import AdvantageInputs, Advantages


@needs(baseline_scores=True)
@torch.no_grad()
def remax(inputs: AdvantageInputs) -> Advantages:
    """Reward-to-go minus the greedy baseline; needs ``inputs.baseline_scores``."""
    mask = as_bool(inputs.response_mask)
    rewards = at_least_float32(keep_valid(inputs.token_rewards, mask))
    baseline = inputs.require("baseline_scores", "remax").to(rewards.dtype)
    returns = keep_valid(rewards.flip(-1).cumsum(-1).flip(-1), mask)
    advantages = keep_valid(returns - baseline.unsqueeze(-1), mask)
    return Advantages(advantages=advantages, returns=returns)
