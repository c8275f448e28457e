"""OPO, on-policy RL with the optimal baseline (arXiv:2505.23585).

    b_g = sum_{j in g} |y_j| s_j / sum_{j in g} |y_j|     (length-weighted group mean)
    a_i = s_i - b_g, broadcast over valid tokens; returns = advantages.

A group whose scores are all equal (singletons included) gets exactly 0.
"""

import torch

from ascent.algos.groups import (
    broadcast_to_tokens,
    dense_group_index,
    group_stats,
    group_sum,
    sequence_scores,
)
from ascent.algos.masking import as_bool
from ascent.algos.types import AdvantageInputs, Advantages


@torch.no_grad()
def opo(inputs: AdvantageInputs) -> Advantages:
    """Length-weighted-baseline advantages; needs ``inputs.group_ids``."""
    scores = sequence_scores(inputs.token_rewards, inputs.response_mask)
    lengths = as_bool(inputs.response_mask).sum(dim=-1).to(scores.dtype)
    group_ids = inputs.require("group_ids", "opo")
    index, num_groups = dense_group_index(group_ids)
    total_length = group_sum(lengths, index, num_groups)
    baseline = group_sum(lengths * scores, index, num_groups) / total_length.clamp(min=1)
    advantage = torch.where(group_stats(scores, group_ids).uniform, 0.0, scores - baseline[index])
    tokens = broadcast_to_tokens(advantage, inputs.response_mask)
    return Advantages(advantages=tokens, returns=tokens)
