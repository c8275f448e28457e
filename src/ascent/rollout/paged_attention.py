"""Attention of new tokens over a paged KV cache, and the writes that put them there.

Shapes: one layer's pool ``k_pool``/``v_pool`` is (blocks, block_size, kv_heads, D); a block
table (B, nb) lists each row's blocks in order (padded with the scratch block 0); queries q
are (B, heads, T, D) at absolute positions ``positions`` (B, T). Query t of row b attends to
the keys at positions 0..positions[b, t] of its row (its own included: written first).

``attend`` gathers each row's blocks into a (B, kv_heads, nb * block_size, D) view and runs
SDPA with that causal mask, so work and memory follow the blocks a row holds, not
``max_model_len``; grouped-query heads are expanded by SDPA itself (``enable_gqa``).
"""

import torch
import torch.nn.functional as F
from torch import Tensor


def write(k_pool: Tensor, v_pool: Tensor, slots: Tensor, keys: Tensor, values: Tensor) -> None:
    """Store keys/values (N, kv_heads, D) at flat cache rows ``slots`` (N,) =
    block * block_size + offset."""
    kv_heads, dim = k_pool.shape[-2:]
    k_pool.view(-1, kv_heads, dim).index_copy_(0, slots, keys)
    v_pool.view(-1, kv_heads, dim).index_copy_(0, slots, values)


def gather(pool: Tensor, tables: Tensor) -> Tensor:
    """(B, kv_heads, nb * block_size, D): each row's blocks, in table order."""
    rows, width = tables.shape
    _, size, kv_heads, dim = pool.shape
    picked = pool.index_select(0, tables.reshape(-1))
    return picked.view(rows, width * size, kv_heads, dim).transpose(1, 2)


def attend(q: Tensor, k_pool: Tensor, v_pool: Tensor, tables: Tensor, positions: Tensor) -> Tensor:
    """(B, heads, T, D): softmax(q k^T / sqrt(D)) v over each row's positions <= the query's."""
    keys, values = gather(k_pool, tables), gather(v_pool, tables)
    key_positions = torch.arange(keys.shape[2], device=q.device)
    mask = key_positions <= positions[:, :, None]  # (B, T, L)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None], enable_gqa=True)
