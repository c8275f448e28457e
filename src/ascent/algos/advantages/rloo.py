"""RLOO, REINFORCE leave-one-out (arXiv:2402.14740).

    a_i = s_i - mean_{j != i, j in g} s_j = n / (n - 1) * (s_i - mean_g)

broadcast over valid tokens; returns = advantages. A group whose scores are all equal
(singletons included) gets exactly 0.
"""

import torch

from ascent.algos.groups import broadcast_to_tokens, group_stats, sequence_scores
from ascent.algos.types import AdvantageInputs, Advantages


@torch.no_grad()
def rloo(inputs: AdvantageInputs) -> Advantages:
    """Leave-one-out baseline advantages; needs ``inputs.group_ids``."""
    scores = sequence_scores(inputs.token_rewards, inputs.response_mask)
    stats = group_stats(scores, inputs.require("group_ids", "rloo"), inputs.sample_weights)
    n = stats.count
    advantage = torch.where(stats.uniform, 0.0, n / (n - 1).clamp(min=1) * (scores - stats.mean))
    tokens = broadcast_to_tokens(advantage, inputs.response_mask)
    return Advantages(advantages=tokens, returns=tokens)
