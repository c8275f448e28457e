"""The global gradient norm of parameters sharded across ranks, and clipping by it.

Without tensor parallelism every parameter is sharded, never replicated (FSDP2 over all
ranks, and expert shards over the (edp, ep) axes), so each element of a gradient lives on
exactly one rank and

    ||g||^2 = sum over ranks of ||local pieces of the rank||^2,

one all-reduce of a scalar, whatever mesh each parameter lives on (torch's
``clip_grad_norm_`` needs every DTensor on one mesh). With T tensor ranks some pieces are
held by several ranks: a norm's weight is replicated over the tp axis (a Replicate
placement), and a parameter left out of the plan (a router) lives on a mesh without the
tensor ranks, the same on all T of them. Each piece then counts 1 / (its copies).
Clipping scales every gradient by min(1, max_norm / (||g|| + 1e-6)), as torch does.
"""

import functools
import math

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor


def _local(tensor: Tensor) -> Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def copies(grad: Tensor, tensor: DeviceMesh | None) -> int:
    """How many ranks hold the same local piece as this one (module docstring); ``tensor``:
    the mesh's tp axis (None: no tensor parallelism)."""
    if not isinstance(grad, DTensor):
        return 1
    mesh = grad.device_mesh
    held = math.prod(
        mesh.size(dim) for dim, place in enumerate(grad.placements) if place.is_replicate()
    )
    if tensor is None or _spans(mesh, tensor):
        return held
    return held * tensor.size()


@functools.cache
def _spans(mesh: DeviceMesh, tensor: DeviceMesh) -> bool:
    """Whether ``mesh`` holds every rank of this rank's ``tensor`` group (asked once per
    mesh, not per gradient and step)."""
    return set(tensor.mesh.flatten().tolist()) <= set(mesh.mesh.flatten().tolist())


def clip_sharded_gradients(
    params: list[Tensor], max_norm: float, tensor: DeviceMesh | None = None
) -> float:
    """Clip the gradients of ``params`` in place to global norm ``max_norm``; returns the
    norm before clipping (inf or nan when a gradient is not finite). On one rank the result
    is torch's ``clip_grad_norm_``'s to the bit (same float32 reductions, same order): the
    learning tests' runs do not move. ``tensor``: the mesh's tp axis, if any."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    norms = torch.stack([torch.linalg.vector_norm(_local(grad)) for grad in grads])
    counts = [copies(grad, tensor) for grad in grads]
    if max(counts) == 1:
        total = torch.linalg.vector_norm(norms)
    else:  # each piece's square once over the ranks that hold it
        shares = torch.tensor(counts, dtype=norms.dtype, device=norms.device)
        total = (norms.square() / shares).sum().sqrt()
    if dist.is_initialized() and dist.get_world_size() > 1:
        squares = total.double().pow(2)
        dist.all_reduce(squares)
        total = squares.sqrt().to(total.dtype)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for grad in grads:  # the DTensor itself: its local piece is scaled, nothing moves
        grad.mul_(coef)
    return float(total)
