"""Random test cases for the algorithms: masks, group layouts and the awkward corners.

Every case contains, by construction: a singleton group, a group whose scores are all equal,
an all-masked row, rows with interior masked spans (tool output), groups whose members are
interleaved in batch order, and NaN in every masked position of every (B, T) input.
"""

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Case:
    mask: Tensor  # (B, T) bool
    group_ids: Tensor  # (B,) int64, arbitrary values
    token_rewards: Tensor  # (B, T), NaN where masked
    values: Tensor  # (B, T), NaN where masked
    log_probs: Tensor  # (B, T) lp_new, NaN where masked
    old_log_probs: Tensor
    ref_log_probs: Tensor
    rollout_log_probs: Tensor
    advantages: Tensor  # (B, T), NaN where masked
    baseline_scores: Tensor  # (B,)

    @property
    def scores(self) -> list[float]:
        """Sequence scores computed the slow way, for references."""
        rewards, mask = self.token_rewards.tolist(), self.mask.tolist()
        return [
            sum(r for r, m in zip(row, mrow, strict=True) if m)
            for row, mrow in zip(rewards, mask, strict=True)
        ]


def make_case(
    seed: int,
    *,
    batch: int = 24,
    length: int = 12,
    dense_rewards: bool = False,
    dtype: torch.dtype = torch.float64,
    drift: float = 0.3,
) -> Case:
    """A random case; ``drift`` scales how far lp_new, lp_ref, lp_roll stray from lp_old."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    group_sizes = [1, 3, 2]  # a singleton, the all-equal group, the group with an empty row
    while sum(group_sizes) < batch:
        group_sizes.append(int(torch.randint(1, 6, (1,), generator=g)))
    group_sizes[-1] -= sum(group_sizes) - batch
    group_sizes = [s for s in group_sizes if s > 0]
    labels = torch.randperm(10**6, generator=g)[: len(group_sizes)]
    ordered = torch.cat([labels[i].repeat(size) for i, size in enumerate(group_sizes)])
    order = torch.randperm(batch, generator=g)  # interleave the groups in batch order
    group_ids = ordered[order]

    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    mask = torch.arange(length).unsqueeze(0) < lengths.unsqueeze(1)
    for row in range(batch):  # interior masked spans stand for tool output
        if lengths[row] >= 5 and torch.rand((), generator=g) < 0.4:
            start = int(torch.randint(1, int(lengths[row]) - 2, (1,), generator=g))
            mask[row, start : start + 2] = False
    position = order.argsort()  # position[k]: where the k-th sample in group order landed
    mask[position[4]] = False  # an all-masked row, in the third group

    outcome = (torch.rand(batch, generator=g) < 0.5).to(dtype) + 0.25 * rand(batch)
    equal_members = position[1:4]
    outcome[equal_members] = 0.7
    rewards = torch.zeros(batch, length, dtype=dtype)
    if dense_rewards:
        rewards = 0.1 * rand(batch, length)
        rewards[equal_members] = 0.0  # keep that group's scores exactly equal
    for row in range(batch):
        valid = mask[row].nonzero()
        if len(valid):
            rewards[row, valid[-1]] += outcome[row]

    old = -torch.rand(batch, length, generator=g, dtype=dtype) * 3 - 0.05

    def nan_outside(x: Tensor) -> Tensor:
        return torch.where(mask, x, torch.nan)

    return Case(
        mask=mask,
        group_ids=group_ids,
        token_rewards=nan_outside(rewards),
        values=nan_outside(rand(batch, length)),
        log_probs=nan_outside(old + drift * rand(batch, length)),
        old_log_probs=nan_outside(old),
        ref_log_probs=nan_outside(old + drift * rand(batch, length)),
        rollout_log_probs=nan_outside(old + drift * rand(batch, length)),
        advantages=nan_outside(rand(batch, length)),
        baseline_scores=rand(batch),
    )
