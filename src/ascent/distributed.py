"""Differentiable collectives over a process group, for the model-parallel axes (experts,
sequence): each forward exchange has the exchange that carries its gradient back.

- ``all_to_all(x, send, receive)``: rows of x (dim 0) in consecutive groups of ``send[j]``
  go to rank j; the result stacks the ``receive[i]`` rows from each rank i in rank order.
  Its gradient is the reverse exchange.
- ``gather_pieces(piece, sizes)``: every rank's piece (rank i's: sizes[i] rows),
  concatenated in rank order on every rank. Its gradient is that of all_gather, the sum
  over the P ranks of the gradient with respect to the piece; it is used where every rank
  computes the *same* loss of the whole, so that sum is P times the rank's own slice, and
  no exchange is needed.
- ``scale_gradient(x, factor)``: x itself, whose gradient is multiplied by ``factor``.
"""

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, send: list[int], receive: list[int], group: Any) -> Tensor:
        ctx.send, ctx.receive, ctx.group = send, receive, group
        out = x.new_empty((sum(receive), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), receive, send, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        back = grad.new_empty((sum(ctx.send), *grad.shape[1:]))
        dist.all_to_all_single(back, grad.contiguous(), ctx.send, ctx.receive, group=ctx.group)
        return back, None, None, None


def all_to_all(x: Tensor, send: list[int], receive: list[int], group: Any) -> Tensor:
    return _AllToAll.apply(x, send, receive, group)


def exchange_counts(send: Tensor, group: Any) -> list[int]:
    """How many rows each rank sends to this one, given what this one sends to each."""
    receive = torch.empty_like(send)
    dist.all_to_all_single(receive, send, group=group)
    return receive.tolist()


class _GatherPieces(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, piece: Tensor, sizes: list[int], group: Any) -> Tensor:
        rank = dist.get_rank(group)
        ctx.start, ctx.size, ctx.ranks = sum(sizes[:rank]), sizes[rank], len(sizes)
        longest, rest = max(sizes), piece.shape[1:]
        padded = piece.new_zeros((longest, *rest))
        padded[: piece.shape[0]] = piece
        gathered = piece.new_empty((len(sizes) * longest, *rest))
        dist.all_gather_into_tensor(gathered, padded, group=group)
        rows = gathered.view(len(sizes), longest, *rest)
        return torch.cat([row[:size] for row, size in zip(rows, sizes, strict=True)])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        return grad[ctx.start : ctx.start + ctx.size] * ctx.ranks, None, None


def gather_pieces(piece: Tensor, sizes: list[int], group: Any) -> Tensor:
    """Every rank's rows (rank i's: sizes[i] of them), end to end; see the module docstring."""
    return _GatherPieces.apply(piece, sizes, group)


class _ScaleGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, factor: float) -> Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        return grad * ctx.factor, None


def scale_gradient(x: Tensor, factor: float) -> Tensor:
    return _ScaleGradient.apply(x, factor)
