"""Advantage estimators that the tests name by import path (``tests.trainer.estimators:...``),
as a user names their own: one that declares it needs a critic's values, one that declares
nothing."""

import torch

from ascent.algos import AdvantageInputs, Advantages, needs
from ascent.algos.masking import as_bool, at_least_float32, keep_valid


@needs(values=True)
@torch.no_grad()
def value_baseline(inputs: AdvantageInputs) -> Advantages:
    """REINFORCE with the critic as baseline: returns_t = sum_{t' >= t} r_t' m_t' (the
    critic's target), A_t = (returns_t - V_t) m_t."""
    mask = as_bool(inputs.response_mask)
    rewards = at_least_float32(keep_valid(inputs.token_rewards, mask))
    values = keep_valid(inputs.require("values", "value_baseline"), mask).to(rewards.dtype)
    returns = keep_valid(rewards.flip(-1).cumsum(-1).flip(-1), mask)
    return Advantages(advantages=keep_valid(returns - values, mask), returns=returns)


@torch.no_grad()
def reward_to_go(inputs: AdvantageInputs) -> Advantages:
    """A_t = returns_t = sum_{t' >= t} r_t' m_t'; declares no needs."""
    mask = as_bool(inputs.response_mask)
    returns = keep_valid(at_least_float32(inputs.token_rewards).flip(-1).cumsum(-1).flip(-1), mask)
    return Advantages(advantages=returns, returns=returns)
