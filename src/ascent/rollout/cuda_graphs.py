"""Decode steps replayed from CUDA graphs: one capture per batch-size bucket.

A decode step for a few dozen sequences is hundreds of small kernels; launching them from
Python costs more than running them. Captured once per bucket (1, 2, 4, ... up to the slot
count), a step becomes one graph launch. Shapes must be static, so a captured step attends
over the whole slot length (masked) and a batch runs in the next bucket up, the extra rows
writing into free slots, which admission overwrites before use. Graphs are invalid once the
cache or an aliased weight moves; the engine then drops them and captures again.
"""

import torch
from torch import Tensor

from ascent.rollout.decoder import DecoderRunner
from ascent.rollout.kv_cache import SlotCache


class GraphedDecoder:
    def __init__(self, runner: DecoderRunner, cache: SlotCache) -> None:
        self.runner, self.cache = runner, cache
        device = cache.k.device
        self.tokens = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.positions = torch.zeros(cache.slots, dtype=torch.long, device=device)
        self.buckets = sorted({min(2**i, cache.slots) for i in range(cache.slots.bit_length() + 1)})
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, Tensor] = {}
        self.pool = torch.cuda.graph_pool_handle()

    def _step(self, batch: int) -> Tensor:
        return self.runner.decode(
            self.cache, self.tokens[:batch], self.positions[:batch], self.cache.max_len
        )

    def _capture(self, batch: int) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph (allocator, lazy init)
            self._step(batch)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.outputs[batch] = self._step(batch)
        self.graphs[batch] = graph

    def decode(self, tokens: Tensor, positions: Tensor) -> Tensor:
        running = tokens.shape[0]
        bucket = next(b for b in self.buckets if b >= running)
        self.tokens[:running] = tokens
        self.positions[:running] = positions
        self.tokens[running:bucket] = 0
        self.positions[running:bucket] = 0
        if bucket not in self.graphs:
            self._capture(bucket)
        self.graphs[bucket].replay()
        return self.outputs[bucket][:running]
