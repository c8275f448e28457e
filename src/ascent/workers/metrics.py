"""Reduce per-micro-batch metrics to one value per name for the whole update, on every rank.

Two kinds: loss terms (``SHARES``) are a micro-batch's share of its mini-batch value (already
divided by the global denominators, times the number of ranks), so they are summed over the
micro-batches of a mini-batch; everything else is a rate (clip fractions, KL estimates, grad
norms) and is averaged. Both are then averaged over mini-batches and epochs, and over ranks,
except counts (``COUNTS``: optimiser steps skipped for a non-finite gradient), which are
summed over mini-batches and epochs.
"""

from collections import defaultdict

import torch
import torch.distributed as dist

SHARES = frozenset({"pg_loss", "entropy", "kl_loss", "vf_loss", "loss"})
COUNTS = frozenset({"skipped_steps"})


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
            value = sum(values) if name in SHARES else sum(values) / len(values)
            self._done[name].append(value)
        for name, value in step_metrics.items():
            self._done[name].append(float(value))
        self._mini.clear()

    def result(self, device: torch.device) -> dict[str, float]:
        """Means (sums for counts) over mini-batches, then means over ranks (the same dict
        on every rank)."""
        names = sorted(self._done)
        local = torch.tensor(
            [sum(self._done[n]) / (1 if n in COUNTS else len(self._done[n])) for n in names],
            dtype=torch.float64,
            device=device,
        )
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(local)
            local /= dist.get_world_size()
        return {f"{self.prefix}/{n}": v for n, v in zip(names, local.tolist(), strict=True)}
