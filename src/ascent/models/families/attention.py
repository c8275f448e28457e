"""A decoder layer's attention as the native engine runs it: projections, norms and rotary
positions on the family's side; storing keys and values and attending over the paged cache
on the engine's side, through ``attend``.

``attend(q, k, v, kernel) -> (B, heads, T, Dv)`` takes q (B, heads, T, Dk) and the new keys
and values (B, kv_heads, T, Dk / Dv), writes those to the layer's cache, and returns
softmax(kernel.scale * q k^T) v over every key each query may see (causal, and within
``kernel.window`` for a sliding-window layer).

Two shapes of attention:

- ``HeadAttention``: multi-head / grouped-query attention (Llama, Qwen, Gemma, Phi-3, OLMo
  2): q, k, v from separate or fused projections, optional q/k RMSNorm per head (Qwen3,
  Gemma 3) or over the whole projection (OLMo 2), rotary positions on q and k, the output
  projection after.
- ``LatentAttention``: DeepSeek's multi-head latent attention, cached compressed (see its
  docstring).
"""

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from ascent.models.families.blocks import NO_NORM, AnyNorm, Linear, Rotations, project


@dataclass(frozen=True)
class AttentionKernel:
    """How the engine attends for one layer: ``scale`` times q . k (1/sqrt(Dk) for most,
    query_pre_attn_scalar^-1/2 for Gemma, YaRN's mscale^2 / sqrt(Dk) for DeepSeek), and a
    sliding ``window`` (keys at positions > query - window; None: every earlier key)."""

    scale: float
    window: int | None = None


class Attend(Protocol):
    def __call__(self, q: Tensor, k: Tensor, v: Tensor, kernel: AttentionKernel) -> Tensor: ...


@dataclass(frozen=True)
class CacheShape:
    """What one layer keeps per cached position: kv_heads keys of key_dim and values of
    value_dim (equal but for latent attention)."""

    kv_heads: int
    key_dim: int
    value_dim: int


@dataclass(frozen=True)
class HeadAttention:
    """Grouped-query attention. ``qkv``: three projections, or one fused (Phi-3's
    ``qkv_proj``, split by rows into q, k, v); ``norm_per_head``: the q/k norms act on each
    head's D dimensions (Qwen3, Gemma 3), else on the whole projection before the heads are
    split (OLMo 2); ``rotation``: which of the family's rotations it uses."""

    qkv: tuple[Linear, ...]
    o: Linear
    heads: int
    kv_heads: int
    head_dim: int
    kernel: AttentionKernel
    q_norm: AnyNorm = NO_NORM
    k_norm: AnyNorm = NO_NORM
    norm_per_head: bool = True
    rotation: str = "default"

    @property
    def cache(self) -> CacheShape:
        return CacheShape(self.kv_heads, self.head_dim, self.head_dim)

    def _projections(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if len(self.qkv) == 3:
            return tuple(project(x, weights) for weights in self.qkv)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return project(x, self.qkv[0]).split((q_size, kv_size, kv_size), dim=-1)

    def __call__(self, x: Tensor, rotations: Rotations, attend: Attend) -> Tensor:
        """x (B, T, hidden) -> the attention's output (B, T, hidden)."""
        batch, length, _ = x.shape
        q, k, v = self._projections(x)
        if not self.norm_per_head:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(batch, length, self.heads, self.head_dim)
        k = k.view(batch, length, self.kv_heads, self.head_dim)
        v = v.view(batch, length, self.kv_heads, self.head_dim)
        if self.norm_per_head:
            q, k = self.q_norm(q), self.k_norm(k)
        rotate = rotations[self.rotation]
        q, k = rotate(q.transpose(1, 2)), rotate(k.transpose(1, 2))
        attended = attend(q, k, v.transpose(1, 2), self.kernel)
        return project(attended.transpose(1, 2).reshape(batch, length, -1), self.o)


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V2/V3), cached compressed and computed absorbed.

    Per token: c = norm(x W_dkv) (r dims, the latent) and k_R = rope(x W_kr) (d_R dims, one
    for all heads); per head h: q_h = (q_h^N, rope(q_h^R)) from x (through a low-rank
    q_a -> norm -> q_b, or one q projection), and transformers' keys and values are
    k_h = (W_UK_h c, k_R), v_h = W_UV_h c with kv_b = (W_UK; W_UV) per head.

    Since q_h . k_h = (W_UK_h^T q_h^N) . c + q_h^R . k_R, the cache keeps one "head" per
    position: key (c, k_R) of r + d_R dims and value c of r dims, and each query head
    becomes (W_UK_h^T q_h^N, q_h^R); the attention's output per head, o_h = sum_t a_t c_t,
    becomes W_UV_h o_h before the output projection. The same scores and outputs as the
    expanded form (up to float rounding), with r + d_R + r numbers cached per token instead
    of heads x (d_N + d_R + d_V).
    """

    q: tuple[Linear, ...]  # (q_proj,) or (q_a_proj, q_b_proj) with q_norm between
    q_norm: AnyNorm
    kv_a: Linear  # x -> (c before its norm, k_R before rope): r + d_R
    kv_norm: AnyNorm
    kv_b: Tensor  # (heads * (d_N + d_V), r)
    o: Linear
    heads: int
    latent: int  # r
    nope_dim: int  # d_N
    rope_dim: int  # d_R
    value_dim: int  # d_V
    kernel: AttentionKernel
    rotation: str = "default"

    @property
    def cache(self) -> CacheShape:
        return CacheShape(1, self.latent + self.rope_dim, self.latent)

    def _queries(self, x: Tensor) -> Tensor:
        if len(self.q) == 1:
            return project(x, self.q[0])
        return project(self.q_norm(project(x, self.q[0])), self.q[1])

    def __call__(self, x: Tensor, rotations: Rotations, attend: Attend) -> Tensor:
        batch, length, _ = x.shape
        rotate = rotations[self.rotation]
        q = self._queries(x).view(batch, length, self.heads, self.nope_dim + self.rope_dim)
        q_nope, q_rope = q.transpose(1, 2).split((self.nope_dim, self.rope_dim), dim=-1)
        latent, k_rope = project(x, self.kv_a).split((self.latent, self.rope_dim), dim=-1)
        latent = self.kv_norm(latent)[:, None]  # (B, 1, T, r)
        k_rope = rotate(k_rope[:, None])  # (B, 1, T, d_R)
        absorb = self.kv_b.view(self.heads, self.nope_dim + self.value_dim, self.latent)
        w_uk, w_uv = absorb.split((self.nope_dim, self.value_dim), dim=1)
        q_latent = torch.einsum("bhtn,hnr->bhtr", q_nope, w_uk)
        query = torch.cat((q_latent, rotate(q_rope)), dim=-1)
        key = torch.cat((latent, k_rope), dim=-1)
        out = attend(query, key, latent, self.kernel)  # (B, heads, T, r)
        out = torch.einsum("bhtr,hvr->bthv", out, w_uv).reshape(batch, length, -1)
        return project(out, self.o)


Attention = HeadAttention | LatentAttention
