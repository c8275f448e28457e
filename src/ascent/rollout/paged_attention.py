"""Attention of new tokens over a paged KV cache, and the writes that put them there.

Shapes: one layer's ``v_pool`` is (blocks, kv_heads, block_size, Dv) and ``k_pool``
(blocks, kv_heads, Dk, block_size) (Dk = Dv but for latent attention): a block's keys for
one head are stored transposed, so that a query's scores against them are block-wide
vector operations; a block table (B, nb) lists each row's blocks in order (padded with the
scratch block 0); queries q are (B, heads, T, Dk) at absolute positions ``positions``
(B, T). Query t of row b attends to the keys at positions 0..positions[b, t] of its row
(its own included: written first), or in a sliding-window layer of W only to those after
positions[b, t] - W.

``attend`` runs float32 on a CPU through the C kernel that reads the blocks in place
(``ascent.rollout.kernels``); otherwise it gathers each row's blocks into
a (B, kv_heads, nb * block_size, D) tensor and runs SDPA with that mask. Either way
the work follows the blocks a row holds, not ``max_model_len``; grouped-query heads share
their KV head (``enable_gqa``).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ascent.rollout import kernels


@dataclass(frozen=True)
class PagedBatch:
    """What every layer of one pass shares, computed once per pass rather than per layer:
    ``tables`` (B, nb) int64; ``positions`` (B, T) int64, each query's position, padded
    queries past a row's table clamped into it (their outputs are never read); ``blocks``
    and ``offsets`` (N,): where each new key and value goes."""

    tables: Tensor
    positions: Tensor
    blocks: Tensor
    offsets: Tensor

    @classmethod
    def of(cls, tables: Tensor, positions: Tensor, slots: Tensor, block_size: int) -> "PagedBatch":
        """From block tables, query positions and the flat cache rows of the new tokens
        (``slots`` = block * block_size + offset)."""
        last = tables.shape[1] * block_size - 1
        return cls(
            tables=tables.to(torch.int64).contiguous(),
            positions=positions.clamp(max=last).to(torch.int64).contiguous(),
            blocks=slots // block_size,
            offsets=slots % block_size,
        )


def write(k_pool: Tensor, v_pool: Tensor, batch: PagedBatch, keys: Tensor, values: Tensor) -> None:
    """Store keys/values (N, kv_heads, D) at ``batch``'s blocks and offsets."""
    k_pool[batch.blocks, :, :, batch.offsets] = keys
    v_pool[batch.blocks, :, batch.offsets] = values


def gather(pool: Tensor, tables: Tensor, *, transposed: bool = False) -> Tensor:
    """(B, kv_heads, nb * block_size, D): each row's blocks, in table order (``transposed``:
    the pool holds each block as (D, block_size), as the keys' does)."""
    rows, width = tables.shape
    picked = pool.index_select(0, tables.reshape(-1))
    if transposed:
        picked = picked.transpose(-1, -2)
    _, kv_heads, size, dim = picked.shape
    picked = picked.reshape(rows, width, kv_heads, size, dim)
    return picked.transpose(1, 2).reshape(rows, kv_heads, width * size, dim)


def attend(
    q: Tensor,
    k_pool: Tensor,
    v_pool: Tensor,
    batch: PagedBatch,
    *,
    scale: float | None = None,
    window: int | None = None,
) -> Tensor:
    """(B, heads, T, Dv): softmax(scale * q k^T) v over each row's positions <= the query's
    (and, with a sliding ``window``, > the query's - window); scale defaults to 1/sqrt(Dk).

    T > 1 is a prefill after cached context (an agent's next turn).
    """
    tables, positions = batch.tables, batch.positions
    out = kernels.paged_attention(q, k_pool, v_pool, tables, positions, scale=scale, window=window)
    if out is not None:
        return out
    return attend_gathered(q, k_pool, v_pool, tables, positions, scale=scale, window=window)


def visible(key_positions: Tensor, positions: Tensor, window: int | None) -> Tensor:
    """(..., T, L) True where key position l is seen by the query at ``positions`` (..., T):
    l <= position, and l > position - window with a sliding window (transformers' mask)."""
    seen = key_positions <= positions[..., None]
    if window:
        seen &= key_positions > positions[..., None] - window
    return seen


def attend_gathered(
    q: Tensor,
    k_pool: Tensor,
    v_pool: Tensor,
    tables: Tensor,
    positions: Tensor,
    *,
    scale: float | None = None,
    window: int | None = None,
) -> Tensor:
    """``attend`` through gathered blocks and SDPA (any device and dtype)."""
    keys, values = gather(k_pool, tables, transposed=True), gather(v_pool, tables)
    key_positions = torch.arange(keys.shape[2], device=q.device)
    mask = visible(key_positions, positions, window)  # (B, T, L)
    return F.scaled_dot_product_attention(
        q, keys, values, attn_mask=mask[:, None], scale=scale, enable_gqa=True
    )
