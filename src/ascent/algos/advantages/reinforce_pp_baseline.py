"""REINFORCE++ with a group-mean baseline (arXiv:2501.03262, the "baseline" variant).

    a_i = s_i - mean_g, broadcast over valid tokens, then masked_whiten over all valid tokens
    of the batch; returns = advantages.

A group whose scores are all equal, singletons included, gets 0 before whitening (for a
singleton verl uses a baseline of 0, i.e. s_i).
"""

import torch

from ascent.algos.groups import broadcast_to_tokens, group_stats, sequence_scores
from ascent.algos.masking import masked_whiten
from ascent.algos.types import AdvantageInputs, Advantages


@torch.no_grad()
def reinforce_pp_baseline(inputs: AdvantageInputs) -> Advantages:
    """Group-baselined, batch-whitened advantages; needs ``inputs.group_ids``."""
    scores = sequence_scores(inputs.token_rewards, inputs.response_mask)
    stats = group_stats(
        scores, inputs.require("group_ids", "reinforce_pp_baseline"), inputs.sample_weights
    )
    centred = torch.where(stats.uniform, 0.0, scores - stats.mean)
    tokens = broadcast_to_tokens(centred, inputs.response_mask)
    whitened = masked_whiten(tokens, inputs.response_mask)
    return Advantages(advantages=whitened, returns=whitened)
