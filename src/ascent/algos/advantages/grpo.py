"""GRPO (DeepSeekMath, arXiv:2402.03300) and Dr.GRPO (arXiv:2503.20783) outcome advantages.

    a_i = (s_i - mean_g) / (std_g + eps)     (norm_by_std=True; std unbiased, over the group)
    a_i = s_i - mean_g                       (norm_by_std=False: Dr.GRPO)

broadcast over the valid tokens of response i; returns = advantages. A group whose scores are
all equal gets exactly a_i = 0. A singleton group gets a_i = 0: no baseline can be formed from one
sample, so it carries no signal. (verl gives s_i there instead; ascent deliberately does not.)
"""

import torch

from ascent.algos.groups import broadcast_to_tokens, group_stats, sequence_scores
from ascent.algos.types import AdvantageInputs, Advantages


@torch.no_grad()
def grpo(inputs: AdvantageInputs, *, norm_by_std: bool = True, eps: float = 1e-6) -> Advantages:
    """Group-relative advantages; needs ``inputs.group_ids``."""
    scores = sequence_scores(inputs.token_rewards, inputs.response_mask)
    stats = group_stats(scores, inputs.require("group_ids", "grpo"), inputs.sample_weights)
    advantage = scores - stats.mean
    if norm_by_std:
        advantage = advantage / (stats.std + eps)
    advantage = torch.where(stats.uniform, 0.0, advantage)
    tokens = broadcast_to_tokens(advantage, inputs.response_mask)
    return Advantages(advantages=tokens, returns=tokens)


def drgrpo(inputs: AdvantageInputs, *, eps: float = 1e-6) -> Advantages:
    """Dr.GRPO: GRPO without the std division (a_i = s_i - mean_g)."""
    return grpo(inputs, norm_by_std=False, eps=eps)
