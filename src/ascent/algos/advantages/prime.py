"""PRIME's advantage (arXiv:2502.01456, eq. 5): leave-one-out baselines for the outcome score
and for the implicit PRM's token rewards, summed into returns.

For sample i of a group g of n >= 2 responses, with outcome score s_i (the sum of
``token_rewards``, which sit on the last valid token) and process rewards p[i, t]
(``process_rewards``, see ``ascent.algos.implicit_prm``) over its |y_i| valid tokens:

    o[i, t] = r[i, t] - [t = last_i] * (1 / (n - 1)) * sum_{j != i} s_j
    q[i, t] = p[i, t] - (1 / (n - 1)) * sum_{j != i} (1 / |y_j|) sum_u p[j, u]
    c[i, t] = outcome_coef * o[i, t] + process_coef * q[i, t]            (valid tokens)
    G[i, t] = sum_{u >= t, u valid} c[i, u]                              (gamma = 1)
    advantages = masked_whiten(G) if whiten else G;  returns = G

The outcome term alone is RLOO; the process baseline is the other samples' mean reward per
token, so a response is credited for tokens the PRM rates above its group's typical token.
The whitening (over the batch's valid tokens) is that of the authors' recipe; the
coefficients weigh the two terms before it. Rows with no valid token contribute 0.
"""

import torch

from ascent.algos.groups import dense_group_index, group_sum, sequence_scores
from ascent.algos.masking import as_bool, at_least_float32, keep_valid, masked_whiten
from ascent.algos.needs import needs
from ascent.algos.types import AdvantageInputs, Advantages


def leave_one_out_mean(values: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(B,) -> (B,): the mean of ``values`` over the other members of each sample's group;
    every group needs at least 2 members."""
    index, num_groups = dense_group_index(group_ids)
    counts = group_sum(torch.ones_like(values), index, num_groups)
    if bool((counts < 2).any()):
        raise ValueError(
            "prime needs at least 2 responses per prompt (leave-one-out baselines); raise "
            "rollout.samples_per_prompt"
        )
    totals = group_sum(values, index, num_groups)
    return (totals[index] - values) / (counts[index] - 1)


@needs(process_rewards=True, min_group_size=2)
@torch.no_grad()
def prime(
    inputs: AdvantageInputs,
    *,
    outcome_coef: float = 1.0,
    process_coef: float = 1.0,
    whiten: bool = True,
) -> Advantages:
    """Returns of leave-one-out outcome and process rewards; needs ``group_ids`` and
    ``process_rewards``."""
    mask = as_bool(inputs.response_mask)
    group_ids = inputs.require("group_ids", "prime")
    process = at_least_float32(keep_valid(inputs.require("process_rewards", "prime"), mask))
    outcome = at_least_float32(keep_valid(inputs.token_rewards, mask))
    lengths = mask.sum(-1)
    last = torch.where(lengths > 0, mask.shape[1] - 1 - mask.flip(-1).int().argmax(-1), -1)
    outcome_baseline = leave_one_out_mean(sequence_scores(outcome, mask), group_ids)
    is_last = torch.arange(mask.shape[1]).unsqueeze(0) == last.unsqueeze(-1)
    outcome = outcome - is_last * outcome_baseline.unsqueeze(-1)
    per_token = process.sum(-1) / lengths.clamp(min=1)
    process = process - leave_one_out_mean(per_token, group_ids).unsqueeze(-1)
    combined = keep_valid(outcome_coef * outcome + process_coef * process, mask)
    returns = keep_valid(combined.flip(-1).cumsum(-1).flip(-1), mask)
    advantages = masked_whiten(returns, mask) if whiten else returns
    return Advantages(advantages=advantages, returns=returns)
