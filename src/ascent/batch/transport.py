"""Tensor bytes as pickle buffers: how a Batch crosses a process boundary cheaply.

With pickle protocol 5 and a ``buffer_callback`` (what Ray's object store and other
zero-copy transports use) each tensor's bytes leave as one out-of-band
``pickle.PickleBuffer`` that views the tensor's own memory: nothing is copied into the
pickle stream and nothing goes through ``torch.save``. Without a callback, protocol 5
writes the same bytes in-band; protocols below 5 (the ``pickle`` default before Python
3.14, ``multiprocessing`` queues, ``copy.deepcopy``) fall back to one ``bytes`` copy.

What the receiver gets: CPU tensors (a CUDA tensor is copied to the host first, since the
receiver may have no such device), without autograd history. Tensors rebuilt from
writable buffers share memory with them (zero-copy); a read-only buffer (Ray's shared
memory) or a misaligned one is copied once, so the tensors are always writable and safe.
"""

import math
import pickle
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

TensorSpec = tuple[str, torch.dtype, tuple[int, ...]]  # name, dtype, shape


def tensors_to_buffers(
    tensors: Mapping[str, Tensor], protocol: int
) -> tuple[list[TensorSpec], list[Any]]:
    """Specs and one buffer per tensor: ``PickleBuffer`` (no copy of a contiguous CPU
    tensor) for protocol >= 5, else ``bytes``."""
    specs, buffers = [], []
    for name, tensor in tensors.items():
        host = tensor.detach().to("cpu").contiguous()
        # A uint8 view of the raw bytes works for every dtype, bf16 and bool included,
        # which numpy could not represent directly.
        raw = host.reshape(-1).view(torch.uint8).numpy()
        specs.append((name, host.dtype, tuple(host.shape)))
        buffers.append(pickle.PickleBuffer(raw) if protocol >= 5 else raw.tobytes())
    return specs, buffers


def tensors_from_buffers(specs: Sequence[TensorSpec], buffers: Sequence[Any]) -> dict[str, Tensor]:
    """Rebuild the tensors from what ``tensors_to_buffers`` produced (after unpickling)."""
    return {
        name: _tensor_from_buffer(name, buffer, dtype, shape)
        for (name, dtype, shape), buffer in zip(specs, buffers, strict=True)
    }


def _tensor_from_buffer(
    name: str, buffer: Any, dtype: torch.dtype, shape: tuple[int, ...]
) -> Tensor:
    nbytes = math.prod(shape) * dtype.itemsize
    view = memoryview(buffer).cast("B")
    if view.nbytes != nbytes:
        raise ValueError(
            f"transport buffer for tensor {name!r} has {view.nbytes} bytes, expected {nbytes} "
            f"for shape {shape} and dtype {dtype}; buffers were passed in the wrong order?"
        )
    if nbytes == 0:  # torch.frombuffer rejects empty buffers
        return torch.empty(shape, dtype=dtype)
    with warnings.catch_warnings():
        # torch warns that a read-only buffer gives a tensor it cannot protect; such a
        # tensor is cloned below before anyone can write to it.
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        raw = torch.frombuffer(view, dtype=torch.uint8)
    # Kernels assume naturally aligned elements; a fresh allocation is aligned. A clone is
    # also the cheapest copy of a read-only buffer (faster than bytearray on this machine).
    if view.readonly or raw.data_ptr() % dtype.itemsize:
        raw = raw.clone()
    return raw.view(dtype).reshape(shape)
