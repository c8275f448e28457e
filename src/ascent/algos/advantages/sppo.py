"""SPPO's target (arXiv:2405.00675): each response's win rate against the policy that
sampled it, estimated within its group, centred and scaled.

For a group g of n responses with scores s (the sum of ``token_rewards``: a reward model's
score, a judge's grade or a function's), the preference of i over j is Bradley-Terry's

    P(i > j) = sigmoid((s_i - s_j) / temperature)       (temperature > 0)
    P(i > j) = 1[s_i > s_j] + 1/2 * 1[s_i = s_j]          (temperature = 0: a hard rule)

so with a reward model trained on preferences (``ascent rm``) at temperature 1, it is that
model's own preference probability. The win rate against the current policy is estimated by
the others of the group, P_i = mean_{j != i} P(i > j), and the target is

    a_i = eta * (P_i - 1/2)

broadcast over valid tokens (advantages = returns); the ``sppo`` loss regresses each
sequence's log-ratio onto it. A singleton group has no opponent: P_i = 1/2, a_i = 0.
"""

import torch

from ascent.algos.groups import broadcast_to_tokens, group_table, sequence_scores
from ascent.algos.types import AdvantageInputs, Advantages


def win_rates(scores: torch.Tensor, group_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """(B,) P_i: the mean preference of each response over the others of its group."""
    layout = group_table(group_ids)
    table, valid = layout.table(scores), layout.valid
    gap = table.unsqueeze(2) - table.unsqueeze(1)  # [g, i, j] = s_i - s_j
    if temperature > 0:
        preference = torch.sigmoid(gap / temperature)
    else:
        preference = (gap > 0).to(scores) + 0.5 * (gap == 0).to(scores)
    others = valid.unsqueeze(2) & valid.unsqueeze(1)
    others &= ~torch.eye(valid.shape[1], dtype=torch.bool, device=valid.device)
    count = others.sum(-1)
    wins = (preference * others).sum(-1)
    rates = torch.where(count > 0, wins / count.clamp(min=1), torch.full_like(wins, 0.5))
    return layout.samples(rates)


@torch.no_grad()
def sppo(inputs: AdvantageInputs, *, eta: float = 1.0, temperature: float = 1.0) -> Advantages:
    """eta * (win rate - 1/2) on every valid token; needs ``inputs.group_ids``."""
    if temperature < 0:
        raise ValueError(f"sppo: temperature={temperature} must be >= 0 (0: a hard rule)")
    scores = sequence_scores(inputs.token_rewards, inputs.response_mask)
    rates = win_rates(scores, inputs.require("group_ids", "sppo"), temperature)
    tokens = broadcast_to_tokens(eta * (rates - 0.5), inputs.response_mask)
    return Advantages(advantages=tokens, returns=tokens)
