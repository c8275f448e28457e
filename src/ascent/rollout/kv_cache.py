"""The paged KV cache: keys and values in fixed-size blocks, memory grown as tokens arrive.

v is (layers, blocks, kv_heads, block_size, value_dim); k is (layers, blocks, kv_heads,
key_dim, block_size): each block's keys transposed, as the CPU attention kernel reads them.
What a position caches is its family's (``CacheShape``): kv_heads keys and values of one
head dimension, or for latent attention one "head" of a compressed key wider than its
value.
Block 0 is scratch: padded table entries point at it and padded rows of a captured decode
step write into it, so it is never handed to a sequence. Blocks 1.. are
``BlockAllocator``'s (free, held, or cached).

Memory, two ways:

- ``memory_bytes`` unset: the tensors start with room for one block per sequence and grow
  (by the blocks asked for, at least 1/16 of what exists, so growth is rare and the excess
  small) when no block is free; a cached prefix block is evicted before the tensors grow. So
  the memory follows the tokens live at the busiest moment, whatever ``max_len`` is (it
  could reach ``max_num_seqs`` sequences of ``max_len`` tokens only if they were that long).
- ``memory_bytes`` set: that much is allocated at once (as vLLM reserves its cache), and
  blocks that finished sequences leave stay cached until the space is needed: the budget to
  give when contexts should outlive their requests (agent episodes waiting for a seat).

``sleep`` frees it all (training gets the memory back) and forgets the cached prefixes.

Beside its keys, each position may keep integer records (``records=(S, k)``: a mixture of
experts' routes, ``ascent.rollout.position_records``), written and read through
``records``, which follow the blocks.
"""

import math

import torch
from torch import Tensor

from ascent.rollout.kv_blocks import BlockAllocator
from ascent.rollout.position_records import PositionRecords

DEFAULT_BLOCK_SIZE = 16


class PagedKVCache:
    def __init__(
        self,
        *,
        layers: int,
        kv_heads: int,
        key_dim: int,
        value_dim: int,
        max_len: int,
        max_seqs: int,
        dtype: torch.dtype,
        device: torch.device,
        memory_bytes: int | None = None,
        block_size: int = DEFAULT_BLOCK_SIZE,
        records: tuple[int, int] | None = None,
    ) -> None:
        self.layers, self.kv_heads = layers, kv_heads
        self.key_dim, self.value_dim = key_dim, value_dim
        self.records = PositionRecords(records, block_size, device)
        self.block_size, self.max_len, self.max_seqs = block_size, max_len, max_seqs
        self.dtype, self.device = dtype, device
        self.token_bytes = layers * kv_heads * (key_dim + value_dim) * dtype.itemsize
        self.block_bytes = self.token_bytes * block_size
        self.blocks_per_seq = math.ceil(max_len / block_size)
        needed = self.blocks_per_seq + 1  # one whole sequence, and its next block
        if memory_bytes is None:
            limit = max_seqs * self.blocks_per_seq + 1
        else:
            limit = memory_bytes // self.block_bytes
        if limit < needed:
            raise ValueError(
                f"the KV cache budget of {memory_bytes} bytes holds no sequence: one of "
                f"{max_len} tokens needs {needed} blocks of {self.block_bytes} bytes; raise "
                "the budget or lower max_len"
            )
        self.limit, self.reserved = limit, memory_bytes is not None
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.blocks = BlockAllocator(block_size, capacity=0, limit=limit)
        self.peak_blocks = 0  # the most blocks held at once since the last reset
        self.wake()

    # -- memory -------------------------------------------------------------------------

    def wake(self) -> None:
        """Allocate the cache (no-op when awake)."""
        if self.k is None:
            self.blocks = BlockAllocator(self.block_size, capacity=0, limit=self.limit)
            self._resize(self.limit if self.reserved else min(self.limit, self.max_seqs + 1))

    def sleep(self) -> None:
        """Free the cache memory and its cached prefixes (``wake`` starts empty)."""
        self.k = self.v = None
        self.records.free()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @property
    def awake(self) -> bool:
        return self.k is not None

    @property
    def bytes(self) -> int:
        """Memory the cache holds now (keys and values of every allocated block)."""
        return 0 if self.k is None else self.k.shape[1] * self.block_bytes

    @property
    def held_blocks(self) -> int:
        """Blocks some sequence holds now (the scratch block not counted)."""
        return self.blocks.in_use - 1

    @property
    def available(self) -> int:
        """Blocks a sequence could still get: free, cached, or by growing to the limit."""
        return self.blocks.available + self.limit - self.k.shape[1]

    def _resize(self, total: int) -> None:
        """Hold ``total`` blocks (scratch included), keeping what the old ones hold."""
        shape = (self.layers, total, self.kv_heads, self.block_size, self.value_dim)
        key_shape = (*shape[:3], self.key_dim, self.block_size)
        # One pass over the new memory: the old blocks copied, only the new ones zeroed
        # (zeroing all, then copying, touched every old block twice: 3% of a decode step
        # at 8 sequences on SmolLM2). Zeroed, never garbage: gathered attention multiplies
        # the unwritten tail of a block by a zero weight, and 0 x NaN would be NaN.
        k = torch.empty(key_shape, dtype=self.dtype, device=self.device)
        v = torch.empty(shape, dtype=self.dtype, device=self.device)
        kept = 0 if self.k is None else self.k.shape[1]
        if kept:
            k[:, :kept] = self.k
            v[:, :kept] = self.v
        k[:, kept:] = 0
        v[:, kept:] = 0
        self.k, self.v = k, v
        self.records.resize(total, kept)
        if self.blocks.capacity == 0:
            self.blocks.grow(total)
            self.blocks.free.remove(0)  # scratch
            self.blocks.refs[0] = 1
        else:
            self.blocks.grow(total)

    # -- blocks ---------------------------------------------------------------------------

    def allocate(self, count: int) -> list[int] | None:
        """``count`` blocks for one table, growing the tensors if need be; None (and
        nothing taken) when the budget has no room for them."""
        if count > self.available:
            return None
        short = count - self.blocks.available
        if short > 0:
            total = self.k.shape[1]
            self._resize(min(self.limit, total + max(short, total // 16)))
        taken = [self.blocks.allocate() for _ in range(count)]
        self.peak_blocks = max(self.peak_blocks, self.held_blocks)
        return taken

    def copy_block(self, source: int, target: int) -> None:
        """Copy-on-write: ``target`` gets ``source``'s keys and values (every layer)."""
        self.k[:, target] = self.k[:, source]
        self.v[:, target] = self.v[:, source]
        self.records.copy_block(source, target)

    def records_of(self, table: list[int], length: int) -> Tensor | None:
        """(length, S, k): the records of positions [0, length) of the sequence whose blocks
        are ``table`` (None: the model records nothing, or the cache sleeps)."""
        if self.k is None:
            return None
        return self.records.read(self.slots(table, 0, length))

    def slot(self, table: list[int], position: int) -> int:
        """The flat cache row (block * block_size + offset) of ``position`` in ``table``."""
        return table[position // self.block_size] * self.block_size + position % self.block_size

    def slots(self, table: list[int], start: int, end: int) -> list[int]:
        """Flat cache rows of positions [start, end)."""
        return [self.slot(table, position) for position in range(start, end)]

    def table_tensor(self, tables: list[list[int]]) -> Tensor:
        """Block tables (B, longest table), padded with the scratch block."""
        width = max(len(t) for t in tables)
        rows = [t + [0] * (width - len(t)) for t in tables]
        return torch.tensor(rows, dtype=torch.long, device=self.device)
