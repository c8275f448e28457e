"""GPG, group policy gradient (arXiv:2504.02546).

    a_i   = alpha * (s_i - mean_g),  alpha = B / max(#{i : s_i != 0}, 1)

alpha rescales the batch so that samples with zero reward, which carry no gradient, do not
shrink the update. Broadcast over valid tokens; returns = advantages. A group whose scores
are all equal (singletons included) gets exactly 0.
Pair it with the ``reinforce`` policy loss.
"""

import torch

from ascent.algos.groups import broadcast_to_tokens, group_stats, sequence_scores
from ascent.algos.types import AdvantageInputs, Advantages


@torch.no_grad()
def gpg(inputs: AdvantageInputs) -> Advantages:
    """Rescaled group-mean-baseline advantages; needs ``inputs.group_ids``."""
    scores = sequence_scores(inputs.token_rewards, inputs.response_mask)
    stats = group_stats(scores, inputs.require("group_ids", "gpg"), inputs.sample_weights)
    # Counted in episodes where samples carry weights (all 1: B / #{s_i != 0}).
    w = torch.ones_like(scores) if inputs.sample_weights is None else inputs.sample_weights
    alpha = w.sum() / (w * (scores != 0)).sum().clamp(min=1e-12).to(scores.dtype)
    advantage = torch.where(stats.uniform, 0.0, alpha * (scores - stats.mean))
    tokens = broadcast_to_tokens(advantage, inputs.response_mask)
    return Advantages(advantages=tokens, returns=tokens)
