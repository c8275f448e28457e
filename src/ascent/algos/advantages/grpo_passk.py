"""Pass@k-style GRPO: only the best sample of each group is credited.

For each group with sorted scores s_(1) >= s_(2) >= ...: the best sample (the first one in
batch order on a tie) gets a = s_(1) - s_(2), divided by (std_g + eps) when norm_by_std; every
other sample gets 0. Singleton groups get 0 (no second sample to compare with).
"""

import torch

from ascent.algos.groups import (
    broadcast_to_tokens,
    dense_group_index,
    group_reduce,
    group_stats,
    sequence_scores,
)
from ascent.algos.types import AdvantageInputs, Advantages


@torch.no_grad()
def grpo_passk(
    inputs: AdvantageInputs, *, norm_by_std: bool = True, eps: float = 1e-6
) -> Advantages:
    """Best-of-group advantages; needs ``inputs.group_ids``."""
    group_ids = inputs.require("group_ids", "grpo_passk")
    scores = sequence_scores(inputs.token_rewards, inputs.response_mask)
    index, num_groups = dense_group_index(group_ids)
    positions = torch.arange(scores.numel(), device=scores.device)

    best = group_reduce(scores, index, num_groups, "amax")
    # The first sample (in batch order) that attains its group's maximum is "the best".
    candidate = torch.where(scores == best[index], positions, scores.numel())
    first = torch.full((num_groups,), scores.numel(), device=scores.device)
    first = first.scatter_reduce(0, index, candidate, reduce="amin")
    is_best = positions == first[index]

    others = torch.where(is_best, -torch.inf, scores)
    runner_up = group_reduce(others, index, num_groups, "amax")
    stats = group_stats(scores, group_ids, inputs.sample_weights)
    advantage = best[index] - runner_up[index]
    if norm_by_std:
        advantage = advantage / (stats.std + eps)
    advantage = torch.where(is_best & ~stats.uniform, advantage, 0.0)
    tokens = broadcast_to_tokens(advantage, inputs.response_mask)
    return Advantages(advantages=tokens, returns=tokens)
