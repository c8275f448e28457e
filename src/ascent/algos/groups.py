"""Per-group statistics of sequence scores, vectorised (no Python loop over groups)."""

from dataclasses import dataclass

import torch
from torch import Tensor

from ascent.algos.masking import at_least_float32, keep_valid


def sequence_scores(token_rewards: Tensor, response_mask: Tensor) -> Tensor:
    """s_i = sum_t r[i, t] * m[i, t]; (B, T) -> (B,), at least float32."""
    return at_least_float32(keep_valid(token_rewards, response_mask)).sum(dim=-1)


def dense_group_index(group_ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary int group ids (B,) to 0..G-1; returns (index (B,), G)."""
    unique, index = torch.unique(group_ids, return_inverse=True)
    return index, unique.numel()


def group_sum(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    """Per-group sums of ``values`` (B,) -> (G,)."""
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add_(
        0, index, values
    )


@dataclass(frozen=True)
class GroupStats:
    """Statistics of each sample's own group, broadcast back to samples; all (B,)."""

    mean: Tensor
    std: Tensor  # unbiased (n - 1); 0 for a singleton group
    count: Tensor  # group size n (the sum of the weights), same dtype as the scores
    uniform: Tensor  # bool: every score in the group is equal (singletons included)


def group_stats(scores: Tensor, group_ids: Tensor, weights: Tensor | None = None) -> GroupStats:
    """Mean, unbiased std and size of each sample's group (two-pass for stability).

    With ``weights`` w (B,), each sample counts w_i times: n_g = sum w, mean_g = sum w s / n_g,
    var_g = sum w (s - mean_g)^2 / (n_g - 1). A multi-turn episode that a drifting template
    split into k samples gives each 1/k, so the statistics are over episodes, as they are
    over responses when nothing drifts (all weights 1: the unweighted formulas exactly).

    ``uniform`` is decided exactly (max == min), not from the std: the rounded mean of equal
    scores can differ from them by an ulp, and estimators use ``uniform`` to give such groups
    exactly zero advantage.
    """
    index, num_groups = dense_group_index(group_ids)
    w = torch.ones_like(scores) if weights is None else weights.to(scores.dtype)
    count = group_sum(w, index, num_groups)
    mean = group_sum(w * scores, index, num_groups) / count
    centered = scores - mean[index]
    var = group_sum(w * centered**2, index, num_groups) / (count - 1).clamp(min=1)
    uniform = group_reduce(scores, index, num_groups, "amax") == group_reduce(
        scores, index, num_groups, "amin"
    )
    return GroupStats(
        mean=mean[index], std=var.sqrt()[index], count=count[index], uniform=uniform[index]
    )


def group_reduce(values: Tensor, index: Tensor, num_groups: int, reduce: str) -> Tensor:
    """Per-group ``amax`` / ``amin`` of ``values`` (B,) -> (G,)."""
    out = torch.zeros(num_groups, dtype=values.dtype, device=values.device)
    return out.scatter_reduce(0, index, values, reduce=reduce, include_self=False)


def broadcast_to_tokens(per_sequence: Tensor, response_mask: Tensor) -> Tensor:
    """(B,) -> (B, T): the sequence value on every valid token, zero elsewhere."""
    return keep_valid(per_sequence.unsqueeze(-1).expand_as(response_mask), response_mask)


@dataclass(frozen=True)
class GroupTable:
    """Samples laid out by group, for comparisons within groups in O(B * N) memory, not
    O(B^2): row g of a (G, N) table holds group g's members in batch order, N the largest
    group's size; ``valid`` (G, N) marks the filled cells."""

    index: Tensor  # (B,) each sample's group, 0..G-1
    slot: Tensor  # (B,) its column
    valid: Tensor  # (G, N) bool

    def table(self, values: Tensor) -> Tensor:
        """(B,) -> (G, N), zero in the cells no sample fills."""
        out = values.new_zeros(self.valid.shape)
        out[self.index, self.slot] = values
        return out

    def samples(self, table: Tensor) -> Tensor:
        """(G, N) -> (B,): each sample's cell."""
        return table[self.index, self.slot]


def group_table(group_ids: Tensor) -> GroupTable:
    """The layout of ``group_ids`` (B,) as a GroupTable."""
    index, num_groups = dense_group_index(group_ids)
    counts = torch.bincount(index, minlength=num_groups)
    order = torch.argsort(index, stable=True)
    starts = counts.cumsum(0) - counts
    slot = torch.empty_like(index)
    slot[order] = torch.arange(len(index), device=index.device) - starts[index[order]]
    width = int(counts.max()) if len(index) else 0
    valid = torch.zeros(num_groups, width, dtype=torch.bool, device=index.device)
    valid[index, slot] = True
    return GroupTable(index=index, slot=slot, valid=valid)
