"""The global gradient norm of parameters sharded across ranks, and clipping by it.

Every parameter here is sharded, never replicated (FSDP2 over all ranks, and expert shards
over the (edp, ep) axes), so each element of a gradient lives on exactly one rank and

    ||g||^2 = sum over ranks of ||local pieces of the rank||^2,

one all-reduce of a scalar, whatever mesh each parameter lives on (torch's
``clip_grad_norm_`` needs every DTensor on one mesh). Clipping scales every gradient by
min(1, max_norm / (||g|| + 1e-6)), as torch does.
"""

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.tensor import DTensor


def _local(tensor: Tensor) -> Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def clip_sharded_gradients(params: list[Tensor], max_norm: float) -> float:
    """Clip the gradients of ``params`` in place to global norm ``max_norm``; returns the
    norm before clipping (inf or nan when a gradient is not finite). On one rank the result
    is torch's ``clip_grad_norm_``'s to the bit (same float32 reductions, same order): the
    learning tests' runs do not move."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    total = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(_local(grad)) for grad in grads])
    )
    if dist.is_initialized() and dist.get_world_size() > 1:
        squares = total.double().pow(2)
        dist.all_reduce(squares)
        total = squares.sqrt().to(total.dtype)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for grad in grads:  # the DTensor itself: its local piece is scaled, nothing moves
        grad.mul_(coef)
    return float(total)
