"""Matrix products of a CPU engine's decode and prefill passes on oneDNN's prepacked weights.

A decode step multiplies a handful of rows (the running sequences) by every weight matrix:
the weights are read from memory once per step, and how fast they stream decides the step.
PyTorch's CPU ``F.linear`` goes to MKL's sgemm, which streams a plain row-major matrix; oneDNN
reorders a weight once into the blocked layout its kernels read (``_reorder_linear_weight``)
and multiplies by that (``_linear_pointwise``, the path torch.compile's CPU backend and
vLLM's CPU build take). Measured on this project's AMD EPYC with one thread, 8 rows: 2.4-3.4x
faster for every projection of SmolLM2 and Gemma 3, and the 262k-row head of Gemma 3 in 27
ms instead of 92 (``bench/packed_linears.py``).

The packed copies are a cache keyed by the weight tensor: built on a weight's first product,
dropped whole when the engine's weights change (``clear``: every refresh, copied or aliased)
or it sleeps (training gets the memory back). They cost one more copy of the weights while
the engine generates. Float32 on a CPU with oneDNN only; anything else, and
``ASCENT_CPU_PACKED_LINEARS=0``, takes ``F.linear``. Results equal ``F.linear``'s up to float
rounding (another summation order).
"""

import os

import torch
import torch.nn.functional as F
from torch import Tensor

# The rows a packed layout is tuned for: a decode step's batch (oneDNN takes any count).
PACK_ROWS = 8
# Below this many rows a call's fixed cost outweighs the gain (1 row: 0.6-1.0x for a layer's
# projections), except for weights this large (an output head: 2.3x at 1 row).
MIN_ROWS, LARGE = 4, 2**23


def available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether passes on ``device`` in ``dtype`` run on packed weights here."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and os.environ.get("ASCENT_CPU_PACKED_LINEARS", "1") != "0"
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class PackedLinears:
    """``linear(x, weight, bias)`` on packed copies of the weights (module docstring)."""

    def __init__(self) -> None:
        self.packed: dict[int, tuple[Tensor, Tensor]] = {}  # id(weight) -> (weight, packed)

    def __call__(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        if weight.dim() != 2 or x.dtype != torch.float32 or weight.dtype != torch.float32:
            return F.linear(x, weight, bias)
        if x.numel() < MIN_ROWS * x.shape[-1] and weight.numel() < LARGE:
            return F.linear(x, weight, bias)
        entry = self.packed.get(id(weight))
        if entry is None or entry[0] is not weight:
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS)
            entry = self.packed[id(weight)] = (weight, packed)
        rows = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(rows, entry[1], bias, "none", [], "")
        return out.view(*x.shape[:-1], out.shape[-1])

    def clear(self) -> None:
        """Forget every packed copy (the weights changed, or their memory is wanted)."""
        self.packed.clear()

    @property
    def bytes(self) -> int:
        return sum(packed.numel() * packed.element_size() for _, packed in self.packed.values())
