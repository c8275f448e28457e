"""A slotted KV cache: one fixed-size slot per running sequence, allocated up front.

k and v are (layers, slots, kv_heads, max_len, head_dim). A sequence keeps its slot from
admission to finish; running sequences always occupy slots [0, B), so one decode step reads
the views [:, :B] without gathering. When a sequence finishes, the last running one moves
into its slot (one copy of that sequence's keys and values).

Sizing: the slot count is the largest that fits ``memory_bytes`` (capped by ``max_slots``).
``sleep`` frees the tensors (training gets the memory back); ``wake`` allocates them again.
"""

import torch
from torch import Tensor


class SlotCache:
    def __init__(
        self,
        *,
        layers: int,
        kv_heads: int,
        head_dim: int,
        max_len: int,
        max_slots: int,
        dtype: torch.dtype,
        device: torch.device,
        memory_bytes: int | None = None,
    ) -> None:
        self.shape_per_slot = (kv_heads, max_len, head_dim)
        self.layers, self.max_len, self.dtype, self.device = layers, max_len, dtype, device
        per_slot = 2 * layers * kv_heads * max_len * head_dim * dtype.itemsize
        slots = max_slots if memory_bytes is None else min(max_slots, memory_bytes // per_slot)
        if slots < 1:
            raise ValueError(
                f"the KV cache budget of {memory_bytes} bytes holds no sequence: one slot of "
                f"{max_len} tokens needs {per_slot} bytes; raise the budget or lower max_len"
            )
        self.slots = slots
        self.bytes = slots * per_slot
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.wake()

    def wake(self) -> None:
        """Allocate the cache (no-op when awake)."""
        if self.k is None:
            shape = (self.layers, self.slots, *self.shape_per_slot)
            self.k = torch.zeros(shape, dtype=self.dtype, device=self.device)
            self.v = torch.zeros(shape, dtype=self.dtype, device=self.device)

    def sleep(self) -> None:
        """Free the cache memory (the next generate call wakes it again)."""
        self.k = self.v = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @property
    def awake(self) -> bool:
        return self.k is not None

    def write_prefix(self, slot: int, keys: Tensor, values: Tensor) -> None:
        """Put a prefilled prompt's keys/values (layers, kv_heads, length, head_dim) in ``slot``."""
        length = keys.shape[2]
        self.k[:, slot, :, :length] = keys
        self.v[:, slot, :, :length] = values

    def move(self, source: int, target: int, length: int) -> None:
        """Copy the first ``length`` positions of ``source`` into ``target``."""
        self.k[:, target, :, :length] = self.k[:, source, :, :length]
        self.v[:, target, :, :length] = self.v[:, source, :, :length]
