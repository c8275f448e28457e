"""Ring attention: exact attention over a sequence whose tokens are split over P ranks, each
rank's keys and values passed around the ring, the softmax accumulated online.

Each rank holds n of the tokens (any of them: ``ascent.engine.context_parallel`` gives rank r
the chunks r and 2P-1-r, so causal work is balanced) with, per token, its index in the whole
sequence and its row (packed rows attend only within themselves). Query i may attend to key
j when row_i = row_j and index_j <= index_i.

Forward, at step s = 0 .. P-1 rank r holds the keys and values of rank (r - s) mod P and
attends its queries to them (one block), then passes them on:

    S      = q kᵀ · scale, masked to -inf        (H, n, n_k)
    lse_b  = logsumexp_j S,   out_b = softmax(S) v
    lse'   = logaddexp(lse, lse_b)
    out'   = out e^(lse - lse') + out_b e^(lse_b - lse')

Backward (dO given; Δ = Σ_d dO · O per query): the blocks go round again, each with its
running dK, dV, so that after P passes they are home complete:

    P_ij = exp(S_ij - lse_i)      dV += Pᵀ dO      dS = P ∘ (dO vᵀ - Δ)
    dQ  += dS k · scale           dK += dSᵀ q · scale

Nothing of size (N, N) exists: a block is at most (H, n, n_k), and only its queries that may
attend to one of its keys, and those keys, are computed. Grouped key/value heads (G < H) are
read by their H / G query heads; their gradients are summed over them. The math is float32;
outputs come back in the inputs' dtype.
"""

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass(frozen=True)
class Ring:
    """The ranks of the ring and where this rank's tokens are in the whole sequence."""

    group: Any
    size: int
    rank: int  # in the group
    index: Tensor  # (n,) long: each local token's index in the sequence
    row: Tensor  # (n,) long: each local token's packed row

    def neighbours(self) -> tuple[int, int]:
        """Global ranks of the next and the previous rank in the ring."""
        next_rank = dist.get_global_rank(self.group, (self.rank + 1) % self.size)
        previous = dist.get_global_rank(self.group, (self.rank - 1) % self.size)
        return next_rank, previous


def _pass_on(tensors: list[Tensor], ring: Ring) -> list[Tensor]:
    """Send ``tensors`` to the next rank and receive the previous rank's (same shapes: every
    rank holds as many tokens)."""
    next_rank, previous = ring.neighbours()
    received = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in tensors]
    operations = [dist.P2POp(dist.isend, t.contiguous(), next_rank, ring.group) for t in tensors]
    operations += [dist.P2POp(dist.irecv, t, previous, ring.group) for t in received]
    for request in dist.batch_isend_irecv(operations):
        request.wait()
    return received


def _allowed(ring: Ring, index: Tensor, row: Tensor, window: int | None) -> Tensor:
    """(n, n_k) bool: which keys (``index``, ``row``) each local query may attend to."""
    same_row = ring.row[:, None] == row[None, :]
    allowed = same_row & (index[None, :] <= ring.index[:, None])
    if window is not None:
        allowed &= index[None, :] > ring.index[:, None] - window
    return allowed


def _scores(q: Tensor, k: Tensor, allowed: Tensor, scale: float) -> Tensor:
    """S (H, n, n_k) float32, -inf where not allowed; k has H heads (repeated)."""
    scores = torch.einsum("hqd,hkd->hqk", q, k) * scale
    return scores.masked_fill(~allowed, float("-inf"))


def _repeat(x: Tensor, heads: int) -> Tensor:
    """(G, n, D) key/value heads -> (H, n, D), each read by H / G query heads."""
    return x.repeat_interleave(heads // x.shape[0], dim=0)


def _fold(x: Tensor, groups: int) -> Tensor:
    """(H, n, D) gradients of repeated heads -> (G, n, D), summed over each group."""
    return x.view(groups, x.shape[0] // groups, *x.shape[1:]).sum(1)


def _live(allowed: Tensor) -> tuple[Tensor, Tensor]:
    """The queries that may attend to some key of the block, and the keys some query may
    attend to: only they are computed (with load-balanced chunks about half of each block
    is masked whole, and packed rows mask more)."""
    return allowed.any(1).nonzero()[:, 0], allowed.any(0).nonzero()[:, 0]


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, q: Tensor, k: Tensor, v: Tensor, ring: Ring, scale: float, window: int | None
    ) -> Tensor:
        heads, groups = q.shape[0], k.shape[0]
        q32 = q.float()
        out = torch.zeros_like(q32)
        lse = torch.full(q.shape[:2], float("-inf"), dtype=torch.float32, device=q.device)
        block = [k, v, ring.index, ring.row]
        for step in range(ring.size):
            k_b, v_b, index_b, row_b = block
            if step < ring.size - 1:
                block_next = _pass_on(block, ring)
            allowed = _allowed(ring, index_b, row_b, window)
            rows, cols = _live(allowed)
            if rows.numel():  # every live query has a key: its block log-sum-exp is finite
                k_c, v_c = (_repeat(t[:, cols].float(), heads) for t in (k_b, v_b))
                scores = _scores(q32[:, rows], k_c, allowed[rows][:, cols], scale)
                block_lse = torch.logsumexp(scores, dim=-1)
                block_out = (scores - block_lse[..., None]).exp() @ v_c
                before = lse[:, rows]
                merged = torch.logaddexp(before, block_lse)
                out[:, rows] = (
                    out[:, rows] * (before - merged).exp()[..., None]
                    + block_out * (block_lse - merged).exp()[..., None]
                )
                lse[:, rows] = merged
            if step < ring.size - 1:
                block = block_next
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.scale, ctx.groups, ctx.window = ring, scale, groups, window
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple:
        q, k, v, out, lse = ctx.saved_tensors
        ring, scale, groups, window = ctx.ring, ctx.scale, ctx.groups, ctx.window
        heads = q.shape[0]
        q32, d_out = q.float(), grad_out.float()
        delta = (d_out * out).sum(-1, keepdim=True)  # Δ (H, n, 1)
        d_q = torch.zeros_like(q32)
        block = [k, v, ring.index, ring.row, torch.zeros_like(k, dtype=torch.float32)]
        block.append(torch.zeros_like(v, dtype=torch.float32))
        for _ in range(ring.size):
            k_b, v_b, index_b, row_b, d_k, d_v = block
            allowed = _allowed(ring, index_b, row_b, window)
            rows, cols = _live(allowed)
            if rows.numel():
                k_c, v_c = (_repeat(t[:, cols].float(), heads) for t in (k_b, v_b))
                q_r, d_out_r = q32[:, rows], d_out[:, rows]
                scores = _scores(q_r, k_c, allowed[rows][:, cols], scale)
                p = (scores - lse[:, rows, None]).exp()  # masked: exp(-inf) = 0
                d_v[:, cols] += _fold(p.transpose(1, 2) @ d_out_r, groups)
                d_scores = p * (d_out_r @ v_c.transpose(1, 2) - delta[:, rows])
                d_q[:, rows] += d_scores @ k_c * scale
                d_k[:, cols] += _fold(d_scores.transpose(1, 2) @ q_r * scale, groups)
            # every block goes round once more with its gradients: P passes bring it home
            block = _pass_on([k_b, v_b, index_b, row_b, d_k, d_v], ring)
        d_k, d_v = block[4], block[5]
        return d_q.to(q.dtype), d_k.to(k.dtype), d_v.to(v.dtype), None, None, None


def ring_attention(
    q: Tensor, k: Tensor, v: Tensor, ring: Ring, scale: float, window: int | None = None
) -> Tensor:
    """q (H, n, D), k and v (G, n, D) of this rank's tokens -> (H, n, D): each query's
    attention over every rank's keys it may attend to (module docstring); ``window``: a
    sliding-window layer's w (None: attention over the whole row)."""
    return _RingAttention.apply(q, k, v, ring, scale, window)
