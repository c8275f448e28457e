"""Prefill and decode passes of a Llama-family transformers model against a paged KV cache.

Supported: the decoder-only models whose layers are RMSNorm -> attention (RoPE, grouped-query,
optional q/k/v biases, optional per-head q/k RMSNorm) -> RMSNorm -> SiLU-gated MLP or top-k
mixture of SiLU-gated experts: Llama, Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE, Mistral (without
sliding windows shorter than the context). The passes read the model's own parameter tensors,
so a model whose parameters alias the trainer's generates with the trainer's current weights
without a copy. RoPE comes from the model's own rotary module, so every RoPE scaling variant
it supports is reproduced exactly.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ascent.rollout import paged_attention
from ascent.rollout.kv_cache import PagedKVCache
from ascent.rollout.mlp import FeedForward, mlp_of
from ascent.rollout.paged_attention import PagedBatch

RouteSink = Callable[[int, Tensor], None]  # (sparse layer, experts (tokens, k)) -> None
HEAD_ROWS = 1024  # vocabulary rows per slice of the output head on a CPU (see logits)
SUPPORTED = (
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "MistralForCausalLM",
    # mixture-of-experts layers: ``ascent.rollout.mlp`` (Qwen2-MoE's with a shared expert)
    "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
    # vision-language: a Qwen2 language model behind a vision tower (``ascent.rollout.vision``)
    "Qwen2VLForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration",
)


@dataclass(frozen=True)
class Norm:
    weight: Tensor
    eps: float

    @classmethod
    def of(cls, module: nn.Module) -> "Norm":
        return cls(module.weight, getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))


def rms_norm(x: Tensor, norm: Norm) -> Tensor:
    """transformers' RMSNorm: in float32, then scaled by the weight in the input's dtype.
    float32 input goes through torch's fused kernel (one op instead of seven)."""
    if x.dtype == torch.float32 and norm.weight.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.eps)
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + norm.eps)
    return norm.weight * normed.to(x.dtype)


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer's parameters (the model's own Parameter objects, not copies: a
    weight refresh that replaces their data is seen here at once)."""

    input_norm: Norm
    q: tuple[Tensor, Tensor | None]
    k: tuple[Tensor, Tensor | None]
    v: tuple[Tensor, Tensor | None]
    o: tuple[Tensor, Tensor | None]
    q_norm: Norm | None
    k_norm: Norm | None
    post_norm: Norm
    mlp: FeedForward

    @classmethod
    def of(cls, layer: nn.Module) -> "LayerWeights":
        attn = layer.self_attn

        def linear(module: nn.Module) -> tuple[Tensor, Tensor | None]:
            return module.weight, module.bias

        has_qk_norm = hasattr(attn, "q_norm")  # Qwen3: RMSNorm over each head's dimension
        return cls(
            input_norm=Norm.of(layer.input_layernorm),
            q=linear(attn.q_proj),
            k=linear(attn.k_proj),
            v=linear(attn.v_proj),
            o=linear(attn.o_proj),
            q_norm=Norm.of(attn.q_norm) if has_qk_norm else None,
            k_norm=Norm.of(attn.k_norm) if has_qk_norm else None,
            post_norm=Norm.of(layer.post_attention_layernorm),
            mlp=mlp_of(layer),
        )


def rotary_tables(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """The model's cos/sin (B, T, D) as (B, 1, T, D), sin with its first half negated: so
    that ``rotate`` needs one roll instead of two slices, a negation and a concatenation."""
    half = sin.shape[-1] // 2
    signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
    return cos.unsqueeze(1), signed.unsqueeze(1)


def rotate(x: Tensor, cos: Tensor, signed_sin: Tensor) -> Tensor:
    """RoPE, x * cos + rotate_half(x) * sin with rotate_half(x) = (-x2, x1); x (B, heads,
    T, D), the tables from ``rotary_tables``: (x2, x1) * (-sin1, sin2) is the same product."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


class DecoderRunner:
    """Runs ``model`` (a supported transformers causal LM) step by step; ``vision`` (a
    ``VisionPrefill``) for a vision-language model."""

    def __init__(self, model: nn.Module, max_len: int, vision: object | None = None) -> None:
        name = type(model).__name__
        if name not in SUPPORTED:
            raise ValueError(
                f"the native rollout engine supports {', '.join(SUPPORTED)}; {name} is not "
                "one of them: use the transformers reference engine for it"
            )
        config = model.config.get_text_config()
        if getattr(config, "hidden_act", "silu") != "silu":
            raise ValueError(
                f"{name} uses activation {config.hidden_act!r}; only silu is supported"
            )
        window = getattr(config, "sliding_window", None)
        uses_window = getattr(config, "use_sliding_window", name == "MistralForCausalLM")
        if uses_window and window is not None and window < max_len:
            raise ValueError(
                f"{name} attends within a sliding window of {window} < max_len {max_len}; "
                "not supported by the native engine"
            )
        self.model, self.vision = model, vision
        self.base = getattr(model.model, "language_model", model.model)  # the text model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        try:
            self.layers = [LayerWeights.of(layer) for layer in self.base.layers]
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
        # layer index -> its number among the sparse layers (where its routes are kept)
        sparse = [index for index, layer in enumerate(self.layers) if layer.mlp.top_k]
        self.sparse_index = {index: number for number, index in enumerate(sparse)}
        self.has_experts = bool(sparse)
        self.top_k = max(layer.mlp.top_k for layer in self.layers)
        self.final_norm = Norm.of(self.base.norm)
        self.head = model.lm_head.weight

    def _attention_inputs(
        self, layer: LayerWeights, x: Tensor, cos: Tensor, sin: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, heads, T, D), k and v (B, kv_heads, T, D), RoPE applied."""
        batch, length, _ = x.shape
        q = F.linear(x, *layer.q).view(batch, length, self.heads, self.head_dim)
        k = F.linear(x, *layer.k).view(batch, length, self.kv_heads, self.head_dim)
        v = F.linear(x, *layer.v).view(batch, length, self.kv_heads, self.head_dim)
        if layer.q_norm is not None:
            q, k = rms_norm(q, layer.q_norm), rms_norm(k, layer.k_norm)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        return rotate(q, cos, sin), rotate(k, cos, sin), v

    def _finish_layer(
        self,
        layer: LayerWeights,
        hidden: Tensor,
        attended: Tensor,
        index: int = 0,
        remember: "RouteSink | None" = None,
    ) -> Tensor:
        batch, _, length, _ = attended.shape
        merged = attended.transpose(1, 2).reshape(batch, length, -1)
        hidden = hidden + F.linear(merged, *layer.o)
        out, experts = layer.mlp.with_routes(rms_norm(hidden, layer.post_norm))
        if experts is not None and remember is not None:
            remember(self.sparse_index[index], experts)
        return hidden + out

    def logits(self, hidden: Tensor) -> Tensor:
        """(N, V) float32 logits of hidden states (N, hidden). On a CPU the head runs in
        slices of HEAD_ROWS vocabulary rows: the same dot products (bitwise equal on the
        CPUs tried), measured 20-25% faster than one (N x hidden) @ (hidden x 49k) matmul
        at N = 16-64 with torch 2.13's CPU kernels."""
        x = rms_norm(hidden, self.final_norm)
        vocab = self.head.shape[0]
        if x.device.type != "cpu" or vocab <= HEAD_ROWS:
            return F.linear(x, self.head).float()
        logits = x.new_empty(x.shape[0], vocab)
        for start in range(0, vocab, HEAD_ROWS):
            rows = self.head[start : start + HEAD_ROWS]
            torch.mm(x, rows.t(), out=logits[:, start : start + HEAD_ROWS])
        return logits.float()

    def _layers(
        self,
        hidden: Tensor,
        cos: Tensor,
        sin: Tensor,
        attend: Callable,
        remember: "RouteSink | None" = None,
    ) -> Tensor:
        """Every layer over ``hidden`` (B, T, hidden), cos/sin (B, T, D) the model's rotary
        tables; ``attend(index, q, k, v)`` stores the new keys and values in layer
        ``index``'s pool and returns the attention output; ``remember(sparse_layer,
        experts (B T, k))`` keeps a mixture of experts' choices."""
        cos, sin = rotary_tables(cos, sin)
        for index, layer in enumerate(self.layers):
            x = rms_norm(hidden, layer.input_norm)
            q, k, v = self._attention_inputs(layer, x, cos, sin)
            hidden = self._finish_layer(layer, hidden, attend(index, q, k, v), index, remember)
        return hidden

    @torch.no_grad()
    def prefill(self, cache: PagedKVCache, chunk: "PrefillChunk") -> Tensor:
        """New tokens of P rows, right-padded (P, T), each row starting at position
        ``chunk.starts`` after keys already in its blocks -> logits of each row's last new
        token (P, V). Their keys and values are written to the cache at ``chunk.slots``.

        Rows without cached positions attend among their own new tokens (causal SDPA: a
        valid position never sees the padding after it); otherwise over their blocks.
        """
        ids = chunk.ids
        positions = chunk.starts[:, None] + torch.arange(ids.shape[1], device=ids.device)
        hidden = self.base.embed_tokens(ids)
        rope = positions
        if any(v is not None for v in chunk.visions):
            hidden, rope = self._with_images(hidden, positions, chunk)
        cos, sin = self.base.rotary_emb(hidden, rope)
        fresh = chunk.fresh
        batch = PagedBatch.of(chunk.tables, positions, chunk.slots, cache.block_size)

        def attend(index: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            new_k = k.transpose(1, 2)[chunk.valid]  # (N, kv_heads, D)
            new_v = v.transpose(1, 2)[chunk.valid]
            paged_attention.write(cache.k[index], cache.v[index], batch, new_k, new_v)
            if fresh:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return paged_attention.attend(q, cache.k[index], cache.v[index], batch)

        def remember(sparse_layer: int, experts: Tensor) -> None:
            valid = experts.view(*ids.shape, -1)[chunk.valid]  # (N, k), as chunk.slots
            cache.write_routes(sparse_layer, chunk.slots, valid)

        hidden = self._layers(hidden, cos, sin, attend, remember if cache.routes else None)
        last = hidden[torch.arange(ids.shape[0], device=ids.device), chunk.lengths - 1]
        return self.logits(last)

    @torch.no_grad()
    def teacher_forced(self, ids: Tensor) -> Tensor:
        """Final-layer hidden states (T, hidden) of one sequence ``ids`` (T,) computed from
        scratch: causal attention over its own tokens, nothing read from or written to a
        cache (scoring a given text, ``ascent.rollout.scoring``). Pass them to ``logits``."""
        ids = ids[None]
        positions = torch.arange(ids.shape[1], device=ids.device)[None]
        hidden = self.base.embed_tokens(ids)
        cos, sin = self.base.rotary_emb(hidden, positions)

        def attend(index: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        return self._layers(hidden, cos, sin, attend)[0]

    def _with_images(
        self, hidden: Tensor, positions: Tensor, chunk: "PrefillChunk"
    ) -> tuple[Tensor, Tensor]:
        """The chunk's embeddings with image features on the image tokens, and its rotary
        positions as three planes (3, P, T) (``ascent.rollout.vision``)."""
        hidden = hidden.clone()
        planes = positions[None].expand(3, -1, -1).clone()
        length = positions.shape[1]
        for row, vision in enumerate(chunk.visions):
            if vision is None:
                continue
            start = int(chunk.starts[row])
            planes[:, row] = vision.rope_positions(start, start + length).to(planes.device)
            image_rows = vision.image_rows[start : start + int(chunk.lengths[row])]
            here = (image_rows >= 0).nonzero(as_tuple=True)[0]
            if here.numel():
                features = self.vision.features(vision, hidden.device, hidden.dtype)
                hidden[row, here.to(hidden.device)] = features[image_rows[here]]
        return hidden, planes

    @torch.no_grad()
    def decode(
        self,
        cache: PagedKVCache,
        tokens: Tensor,
        positions: Tensor,
        tables: Tensor,
        slots: Tensor,
        rope_shift: Tensor | None = None,
    ) -> Tensor:
        """One token for each of B sequences -> logits (B, V). tokens, positions and slots
        (the flat cache row each new key goes to) are (B,); tables (B, nb) list the blocks
        that hold positions 0..positions[b]. ``rope_shift`` (B,): how far each token's
        rotary position is from its index (multimodal RoPE after images; None: 0)."""
        hidden = self.base.embed_tokens(tokens[:, None])
        rope = positions if rope_shift is None else positions + rope_shift
        cos, sin = self.base.rotary_emb(hidden, rope[:, None])
        batch = PagedBatch.of(tables, positions[:, None], slots, cache.block_size)

        def attend(index: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            paged_attention.write(cache.k[index], cache.v[index], batch, k[:, :, 0], v[:, :, 0])
            return paged_attention.attend(q, cache.k[index], cache.v[index], batch)

        def remember(sparse_layer: int, experts: Tensor) -> None:
            cache.write_routes(sparse_layer, slots, experts)

        hidden = self._layers(hidden, cos, sin, attend, remember if cache.routes else None)
        return self.logits(hidden[:, 0])


@dataclass(frozen=True)
class PrefillChunk:
    """The new tokens of P rows for one prefill pass.

    ids (P, T) right-padded with lengths (P,); starts (P,): positions already cached per row;
    valid (P, T): the real tokens; slots (N,): the flat cache row of each valid token, in
    row-major order; tables (P, nb): each row's blocks after the write; fresh: no row has
    cached positions (attention needs no blocks); visions: per row, its prompt's prepared
    images (``PromptVision``) or None.
    """

    ids: Tensor
    lengths: Tensor
    starts: Tensor
    valid: Tensor
    slots: Tensor
    tables: Tensor
    fresh: bool
    visions: tuple = ()
