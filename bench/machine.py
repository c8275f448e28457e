"""What the machine can do, measured in a bench's own run (never hard-coded): a large
matmul's FLOP/s in a given dtype and a copy's bytes/s, on the CPU or a CUDA device. The
benches that report a share of a peak (``update_flops.py``, ``gpu_check.py``, ``rollout.py``)
take their peaks from here."""

import time

import torch


def synchronize(device) -> None:
    """Wait for the device's queued work (a no-op on the CPU), so that a clock reads it."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def copy_bandwidth(device, nbytes: int = 2**30, repeats: int = 10) -> float:
    """Measured copy bandwidth within ``device`` in bytes/s (read + write of ``nbytes``)."""
    source = torch.empty(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        target.copy_(source)
    synchronize(device)
    return 2 * repeats * source.numel() / (time.perf_counter() - start)


def matmul_peak(device, size: int, dtype: torch.dtype, repeats: int = 10) -> float:
    """FLOP/s of a (size x size) @ (size x size) matmul in ``dtype``: 2 size³ per product,
    over ``repeats`` products after two untimed ones."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start)
