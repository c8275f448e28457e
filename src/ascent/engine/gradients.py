"""The global gradient norm of parameters sharded across ranks, and clipping by it.

Every parameter here is sharded, never replicated (FSDP2 over all ranks, and expert shards
over the (edp, ep) axes), so each element of a gradient lives on exactly one rank and

    ||g||^2 = sum over ranks of the sum of squares of the rank's local pieces,

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
    norm before clipping (inf or nan when a gradient is not finite: nothing is scaled)."""
    grads = [_local(p.grad) for p in params if p.grad is not None]
    device = grads[0].device if grads else torch.device("cpu")
    squares = torch.zeros((), dtype=torch.float64, device=device)
    for grad in grads:
        squares += grad.double().pow(2).sum()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(squares)
    norm = float(squares.sqrt())
    scale = max_norm / (norm + 1e-6)
    if scale < 1 and torch.isfinite(torch.tensor(norm)):
        for grad in grads:
            grad.mul_(scale)
    return norm
