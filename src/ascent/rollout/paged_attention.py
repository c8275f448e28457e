"""Attention of new tokens over a paged KV cache, and the writes that put them there.

Shapes: one layer's ``v_pool`` is (blocks, kv_heads, block_size, D) and ``k_pool``
(blocks, kv_heads, D, block_size): a block's keys for one head are stored transposed, so
that a query's scores against them are block-wide vector operations; a block
table (B, nb) lists each row's blocks in order (padded with the scratch block 0); queries q
are (B, heads, T, D) at absolute positions ``positions`` (B, T). Query t of row b attends to
the keys at positions 0..positions[b, t] of its row (its own included: written first).

``attend`` runs float32 on a CPU through the C kernel that reads the blocks in place
(``ascent.rollout.kernels``); otherwise it gathers each row's blocks into
a (B, kv_heads, nb * block_size, D) tensor and runs SDPA with that causal mask. Either way
the work follows the blocks a row holds, not ``max_model_len``; grouped-query heads share
their KV head (``enable_gqa``).
"""

import torch
import torch.nn.functional as F
from torch import Tensor

from ascent.rollout import kernels


def write(k_pool: Tensor, v_pool: Tensor, slots: Tensor, keys: Tensor, values: Tensor) -> None:
    """Store keys/values (N, kv_heads, D) at cache positions ``slots`` (N,) =
    block * block_size + offset."""
    size = v_pool.shape[2]
    blocks, offsets = slots // size, slots % size
    k_pool[blocks, :, :, offsets] = keys
    v_pool[blocks, :, offsets] = values


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


def attend(q: Tensor, k_pool: Tensor, v_pool: Tensor, tables: Tensor, positions: Tensor) -> Tensor:
    """(B, heads, T, D): softmax(q k^T / sqrt(D)) v over each row's positions <= the query's.

    T > 1 is a prefill after cached context (an agent's next turn); its padded queries past
    the table are clamped into it (their outputs are never read).
    """
    last = tables.shape[1] * v_pool.shape[2] - 1  # padded queries: kept inside the table
    out = kernels.paged_attention(q, k_pool, v_pool, tables, positions.clamp(max=last))
    if out is not None:
        return out
    return attend_gathered(q, k_pool, v_pool, tables, positions)


def attend_gathered(
    q: Tensor, k_pool: Tensor, v_pool: Tensor, tables: Tensor, positions: Tensor
) -> Tensor:
    """``attend`` through gathered blocks and SDPA (any device and dtype)."""
    keys, values = gather(k_pool, tables, transposed=True), gather(v_pool, tables)
    key_positions = torch.arange(keys.shape[2], device=q.device)
    mask = key_positions <= positions[:, :, None]  # (B, T, L)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None], enable_gqa=True)
