"""Decode steps replayed from CUDA graphs: one capture per (batch, table width) bucket.

A decode step for a few dozen sequences is hundreds of small kernels; launching them from
Python costs more than running them. Captured once per bucket, a step becomes one graph
launch. Shapes must be static, so a batch runs in the next batch bucket up (1, 2, 4, ...
sequences) and its block tables are padded to the next width bucket up (1, 2, 4, ... blocks):
attention reads at most twice the blocks the longest running sequence holds, never the
whole ``max_model_len``. Padded rows write into the scratch block. Graphs are invalid once
the cache tensors grow or an aliased weight moves; the engine then captures again.
"""

import torch
from torch import Tensor

from ascent.rollout.decoder import DecoderRunner
from ascent.rollout.kv_cache import PagedKVCache


def buckets(limit: int) -> list[int]:
    """1, 2, 4, ... up to and including ``limit``."""
    return sorted({min(2**i, limit) for i in range(limit.bit_length() + 1)})


class GraphedDecoder:
    def __init__(self, runner: DecoderRunner, cache: PagedKVCache) -> None:
        self.runner, self.cache, self.pool_tensor = runner, cache, cache.k
        device, seqs, width = cache.device, cache.max_seqs, cache.blocks_per_seq
        self.tokens = torch.zeros(seqs, dtype=torch.long, device=device)
        self.positions = torch.zeros(seqs, dtype=torch.long, device=device)
        self.slots = torch.zeros(seqs, dtype=torch.long, device=device)
        self.tables = torch.zeros(seqs, width, dtype=torch.long, device=device)
        self.batch_buckets, self.width_buckets = buckets(seqs), buckets(width)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.outputs: dict[tuple[int, int], Tensor] = {}
        self.pool = torch.cuda.graph_pool_handle()

    @property
    def stale(self) -> bool:
        """The cache grew (new tensors): captured steps read the old ones."""
        return self.cache.k is not self.pool_tensor

    def _step(self, batch: int, width: int) -> Tensor:
        return self.runner.decode(
            self.cache,
            self.tokens[:batch],
            self.positions[:batch],
            self.tables[:batch, :width],
            self.slots[:batch],
        )

    def _capture(self, key: tuple[int, int]) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph (allocator, lazy init)
            self._step(*key)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.outputs[key] = self._step(*key)
        self.graphs[key] = graph

    def decode(self, tokens: Tensor, positions: Tensor, tables: Tensor, slots: Tensor) -> Tensor:
        running, used = tables.shape
        key = (
            next(b for b in self.batch_buckets if b >= running),
            next(w for w in self.width_buckets if w >= used),
        )
        self.tokens[:running], self.positions[:running] = tokens, positions
        self.slots[:running] = slots
        self.tables[:running, :used] = tables
        self.tables[:running, used:] = 0
        self.tokens[running:], self.positions[running:], self.slots[running:] = 0, 0, 0
        self.tables[running:] = 0
        if key not in self.graphs:
            self._capture(key)
        self.graphs[key].replay()
        return self.outputs[key][:running]
