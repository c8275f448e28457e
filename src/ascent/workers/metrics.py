"""Reduce per-micro-batch metrics to one value per name for the whole update, on every rank.

Two kinds: loss terms (``SHARES``) are a micro-batch's share of its mini-batch value (already
divided by the global denominators, times the number of ranks), so they are summed over the
micro-batches of a mini-batch; everything else is a rate (clip fractions, KL estimates, grad
norms) and is averaged. Both are then averaged over mini-batches and epochs, and over ranks,
except counts (``COUNTS``: optimiser steps skipped for a non-finite gradient, or for a
float16 loss-scale overflow), which are summed over mini-batches and epochs, and extremes
(``MAXIMA``, ``MINIMA``), which stay the largest or smallest value at every level.
"""

from collections import defaultdict

import torch
import torch.distributed as dist

SHARES = frozenset(
    {
        "pg_loss",
        "entropy",
        "kl_loss",
        "vf_loss",
        "loss",
        "distill_reverse_kl_loss",  # ascent.workers.distill_terms
        "distill_forward_kl_top_k",
    }
)
COUNTS = frozenset({"skipped_steps", "loss_scale_skipped"})
MAXIMA = frozenset({"rollout_mismatch_max_abs", "rollout_ratio_max"})
# loss_scale: the smallest float16 loss scale S of the update's steps (after any overflow).
MINIMA = frozenset({"rollout_ratio_min", "loss_scale"})


def _reduce(name: str, values: list[float], share: bool = False) -> float:
    if name in MAXIMA:
        return max(values)
    if name in MINIMA:
        return min(values)
    return sum(values) / (1 if share else len(values))


class MetricAccumulator:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._mini: dict[str, list[float]] = defaultdict(list)
        self._done: dict[str, list[float]] = defaultdict(list)

    def add_micro(self, metrics: dict[str, torch.Tensor | float]) -> None:
        """Metrics of one micro-batch."""
        for name, value in metrics.items():
            self._mini[name].append(float(value))

    def end_mini_batch(self, **step_metrics: float) -> None:
        """Close a mini-batch; ``step_metrics`` (grad_norm, lr, ...) are per optimiser step."""
        for name, values in self._mini.items():
            self._done[name].append(_reduce(name, values, share=name in SHARES))
        for name, value in step_metrics.items():
            self._done[name].append(float(value))
        self._mini.clear()

    def result(self, device: torch.device) -> dict[str, float]:
        """Means (sums for counts) over mini-batches, then means over ranks (the same dict
        on every rank)."""
        names = sorted(self._done)
        local = torch.tensor(
            [_reduce(n, self._done[n], share=n in COUNTS) for n in names],
            dtype=torch.float64,
            device=device,
        )
        if dist.is_initialized() and dist.get_world_size() > 1:
            local = _across_ranks(names, local)
        return {f"{self.prefix}/{n}": v for n, v in zip(names, local.tolist(), strict=True)}


def _across_ranks(names: list[str], local: torch.Tensor) -> torch.Tensor:
    """The mean over ranks, or the largest / smallest value for the extremes. Every rank has
    every name (the same code path), so the reductions line up."""
    mean = local.clone()
    dist.all_reduce(mean)
    mean /= dist.get_world_size()
    if not any(n in MAXIMA or n in MINIMA for n in names):
        return mean
    highest, lowest = local.clone(), local.clone()
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    for i, name in enumerate(names):
        if name in MAXIMA:
            mean[i] = highest[i]
        elif name in MINIMA:
            mean[i] = lowest[i]
    return mean
