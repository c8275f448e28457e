"""A C kernel for CPU attention that reads the paged KV cache where it lies.

PyTorch has no CPU attention over a block table: gathering each sequence's blocks into a
contiguous tensor for SDPA copies every live key and value once per layer and step, which
made paged decoding 2-3x slower than attention over a contiguous slot. ``paged_attention.c``
reads the blocks in place instead (see its header for the math), for a decode step and for
a prefill that follows cached context.

It is compiled on first use with the system's C compiler (``$CC``, else ``cc``) for this
CPU (``-march=native``) and kept under ``$ASCENT_CACHE/kernels`` (default
``~/.cache/ascent``), named by a hash of the source, the flags and the CPU, so an edit or
another machine builds its own. Without a compiler (or with ``ASCENT_C_KERNELS=0``) the
engine warns once and gathers instead: the same results, slower. ctypes releases the GIL
during the call, and the kernel runs on ``torch.get_num_threads()`` OpenMP threads.
"""

import ctypes
import hashlib
import os
import platform
import subprocess
import threading
import warnings
from pathlib import Path

import torch
from torch import Tensor

SOURCE = Path(__file__).with_name("paged_attention.c")
# -ffast-math: reassociation vectorises the dot products, and finite math lets expf use
# glibc's vector version (libmvec). The kernel's inputs are finite scores; a model that
# produces NaN gives garbage either way (and the trainer's mismatch metric shows it).
FLAGS = ["-O3", "-march=native", "-ffast-math", "-fPIC", "-shared", "-fopenmp"]
LIBRARIES = ["-lmvec", "-lm"]

TILE, MAX_BLOCK = 16, 64  # LANE and MAX_BLOCK in the source
_lock = threading.Lock()
_state: dict[str, object] = {}


def _cpu_signature() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [line for line in info.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(lines))


def _build() -> ctypes.CDLL:
    compiler = os.environ.get("CC", "cc")
    key = hashlib.sha256(
        SOURCE.read_bytes() + " ".join([compiler, *FLAGS]).encode() + _cpu_signature().encode()
    ).hexdigest()[:16]
    root = Path(os.environ.get("ASCENT_CACHE", "~/.cache/ascent")).expanduser() / "kernels"
    target = root / f"paged_attention-{key}.so"
    if not target.is_file():
        root.mkdir(parents=True, exist_ok=True)
        partial = root / f".{target.name}.{os.getpid()}"
        subprocess.run(
            [compiler, *FLAGS, "-o", str(partial), str(SOURCE), *LIBRARIES],
            check=True,
            capture_output=True,
            text=True,
        )
        os.replace(partial, target)  # atomic: a concurrent build's file is just as good
    library = ctypes.CDLL(str(target))
    function = library.paged_attention_f32
    function.restype = ctypes.c_int
    function.argtypes = (
        [ctypes.c_void_p] * 6 + [ctypes.c_int] * 8 + [ctypes.c_float, ctypes.c_int64, ctypes.c_int]
    )
    return library


def library() -> ctypes.CDLL | None:
    """The compiled kernel, or None (after one warning) when it cannot be built."""
    with _lock:
        if "library" not in _state:
            _state["library"] = None
            if os.environ.get("ASCENT_C_KERNELS", "1") != "0":
                try:
                    _state["library"] = _build()
                except (OSError, subprocess.CalledProcessError) as error:
                    detail = getattr(error, "stderr", None) or error
                    warnings.warn(
                        f"ascent's CPU attention kernel could not be built ({detail}); the "
                        "native engine gathers the KV blocks instead (same results, slower)",
                        stacklevel=2,
                    )
    return _state["library"]


def paged_attention(
    q: Tensor,
    k_pool: Tensor,
    v_pool: Tensor,
    tables: Tensor,
    positions: Tensor,
    *,
    scale: float | None = None,
    window: int | None = None,
) -> Tensor | None:
    """Attention (B, heads, T, Dv) of q (B, heads, T, Dk) over each query's keys at positions
    0..positions[b, t] (B, T) (with a sliding ``window``: only the last ``window`` of them),
    read through ``tables`` (B, nb) from the pools: keys (blocks, kv_heads, Dk, block_size),
    values (blocks, kv_heads, block_size, Dv); scores scale * q . k (default 1/sqrt(Dk)).
    None where the kernel does not apply (not float32 CPU tensors, a block size or head
    dimension not a multiple of 16 or blocks over 64, or no kernel). Every position must lie
    within its row's table."""
    tensors = (q, k_pool, v_pool)
    if q.device.type != "cpu" or any(t.dtype != torch.float32 for t in tensors):
        return None
    _, kv_heads, block_size, value_dim = v_pool.shape
    key_dim = k_pool.shape[2]
    if block_size % TILE or key_dim % TILE or value_dim % TILE or block_size > MAX_BLOCK:
        return None  # the kernel's register tiles take whole lanes of 16
    kernel = library()
    if kernel is None:
        return None
    q = q.contiguous()
    tables = tables.to(torch.int64).contiguous()
    positions = positions.to(torch.int64).contiguous()
    batch, heads, tokens, _ = q.shape
    out = q.new_empty(batch, heads, tokens, value_dim)
    status = kernel.paged_attention_f32(
        q.data_ptr(),
        k_pool.data_ptr(),
        v_pool.data_ptr(),
        tables.data_ptr(),
        positions.data_ptr(),
        out.data_ptr(),
        batch,
        tokens,
        heads,
        kv_heads,
        key_dim,
        value_dim,
        block_size,
        tables.shape[1],
        key_dim**-0.5 if scale is None else scale,
        window or 0,
        torch.get_num_threads(),
    )
    if status == -2:  # the checks above make this unreachable; say so if they drift
        raise RuntimeError(
            f"the CPU attention kernel refused block {block_size} x dims {key_dim}/{value_dim}"
        )
    if status != 0:
        raise MemoryError("the CPU attention kernel could not allocate its score buffer")
    return out
