"""A process's randomness: seeding, deterministic kernels, and the RNG states a checkpoint
keeps so that a resumed run draws the same random numbers as one that never stopped.

Every worker process seeds Python, NumPy and torch (CPU and CUDA) with the run's seed before
each role is built, so models built with random parts (a critic's value head, LoRA adapters)
are the same in every run and on every rank. Deterministic mode additionally makes torch
refuse non-deterministic kernels, and turns off TF32 and cuDNN autotuning, whose choices vary
from run to run; on CPU the kernels are already deterministic for a fixed thread count.
"""

import os
import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def use_deterministic_kernels() -> None:
    # cuBLAS is only deterministic with a fixed workspace; it must be set before the first
    # cuBLAS call, which is why this runs when the process is set up.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def rng_state() -> dict[str, Any]:
    """Every generator this process draws from (picklable; CUDA only where present)."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
