"""Integers the paged KV cache keeps per position beside its keys and values: for a mixture
of experts, the experts each sparse layer sent the position to (``shape = (S, k)``), which
router replay trains with. A model that records nothing has ``shape`` None, and every call
here does nothing (``read`` gives None), so the cache and scheduler never ask which kind of
model they serve.

The table is (S, blocks, block_size, k) int16, -1 where nothing was written, laid out like
the cache's blocks: written where and when a position's keys are (so a cached prefix, a
copied block or a resumed sequence carries the records that made its keys), copied with a
block, grown with the cache, and read back for a whole sequence through its block table.
"""

import torch
from torch import Tensor


class PositionRecords:
    def __init__(
        self, shape: tuple[int, int] | None, block_size: int, device: torch.device
    ) -> None:
        self.shape, self.block_size, self.device = shape, block_size, device
        self.table: Tensor | None = None

    def resize(self, total: int, kept: int) -> None:
        """Room for ``total`` blocks, the first ``kept`` as they were."""
        if self.shape is None:
            return
        channels, width = self.shape
        table = torch.full(
            (channels, total, self.block_size, width), -1, dtype=torch.int16, device=self.device
        )
        if kept:
            table[:, :kept] = self.table[:, :kept]
        self.table = table

    def free(self) -> None:
        self.table = None

    def copy_block(self, source: int, target: int) -> None:
        if self.table is not None:
            self.table[:, target] = self.table[:, source]

    def write(self, channel: int, slots: Tensor, values: Tensor) -> None:
        """Channel ``channel`` (a sparse layer) of the positions at flat cache rows ``slots``
        (N,) takes ``values`` (N, k)."""
        rows = self.table[channel].view(-1, self.shape[1])
        rows[slots] = values.to(torch.int16)

    def read(self, slots: list[int]) -> Tensor | None:
        """(len(slots), S, k) int16 on the CPU, the records of those flat cache rows; None
        when the model records nothing."""
        if self.table is None:
            return None
        index = torch.tensor(slots, dtype=torch.long, device=self.device)
        flat = self.table.view(self.shape[0], -1, self.shape[1])
        return flat[:, index].transpose(0, 1).cpu()
