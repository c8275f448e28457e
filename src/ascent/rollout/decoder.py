"""Prefill and decode passes of a Llama-family transformers model against a slotted cache.

Supported: the decoder-only models whose layers are RMSNorm -> attention (RoPE, grouped-query,
optional q/k/v biases, optional per-head q/k RMSNorm) -> RMSNorm -> SiLU-gated MLP: Llama,
Qwen2, Qwen3, Mistral (without sliding windows shorter than the context). The passes read the
model's own parameter tensors, so a model whose parameters alias the trainer's generates with
the trainer's current weights without a copy. RoPE comes from the model's own rotary module,
so every RoPE scaling variant it supports is reproduced exactly.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ascent.rollout.kv_cache import SlotCache

SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM")


@dataclass(frozen=True)
class Norm:
    weight: Tensor
    eps: float

    @classmethod
    def of(cls, module: nn.Module) -> "Norm":
        return cls(module.weight, getattr(module, "variance_epsilon", getattr(module, "eps", 1e-6)))


def rms_norm(x: Tensor, norm: Norm) -> Tensor:
    """transformers' RMSNorm: in float32, then scaled by the weight in the input's dtype."""
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
    gate: Tensor
    up: Tensor
    down: Tensor

    @classmethod
    def of(cls, layer: nn.Module) -> "LayerWeights":
        attn, mlp = layer.self_attn, layer.mlp

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
            gate=mlp.gate_proj.weight,
            up=mlp.up_proj.weight,
            down=mlp.down_proj.weight,
        )


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x * cos + rotate_half(x) * sin; x (B, heads, T, D), cos/sin (B, T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1)


class DecoderRunner:
    """Runs ``model`` (a supported transformers causal LM) step by step."""

    def __init__(self, model: nn.Module, max_len: int) -> None:
        name = type(model).__name__
        if name not in SUPPORTED:
            raise ValueError(
                f"the native rollout engine supports {', '.join(SUPPORTED)}; {name} is not "
                "one of them: use the transformers reference engine for it"
            )
        config = model.config
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
        self.model = model
        self.base = model.model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        if any(
            getattr(layer.mlp.gate_proj, "bias", None) is not None for layer in self.base.layers
        ):
            raise ValueError(f"{name} has MLP biases; not supported by the native engine")
        self.layers = [LayerWeights.of(layer) for layer in self.base.layers]
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

    def _finish_layer(self, layer: LayerWeights, hidden: Tensor, attended: Tensor) -> Tensor:
        batch, _, length, _ = attended.shape
        merged = attended.transpose(1, 2).reshape(batch, length, -1)
        hidden = hidden + F.linear(merged, *layer.o)
        x = rms_norm(hidden, layer.post_norm)
        return hidden + F.linear(
            F.silu(F.linear(x, layer.gate)) * F.linear(x, layer.up), layer.down
        )

    def _logits(self, hidden: Tensor) -> Tensor:
        return F.linear(rms_norm(hidden, self.final_norm), self.head).float()

    @torch.no_grad()
    def prefill(self, ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Prompts (P, L) right-padded with their lengths (P,) -> logits of each prompt's last
        token (P, V) and its keys and values (layers, P, kv_heads, L, D).

        Causal attention alone is enough: a valid position never sees the padding after it.
        """
        positions = torch.arange(ids.shape[1], device=ids.device).expand(ids.shape)
        hidden = self.base.embed_tokens(ids)
        cos, sin = self.base.rotary_emb(hidden, positions)
        keys, values = [], []
        for layer in self.layers:
            x = rms_norm(hidden, layer.input_norm)
            q, k, v = self._attention_inputs(layer, x, cos, sin)
            keys.append(k)
            values.append(v)
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            hidden = self._finish_layer(layer, hidden, attended)
        last = hidden[torch.arange(ids.shape[0], device=ids.device), lengths - 1]
        return self._logits(last), torch.stack(keys), torch.stack(values)

    @torch.no_grad()
    def decode(self, cache: SlotCache, tokens: Tensor, positions: Tensor, span: int) -> Tensor:
        """One token for each of the B running sequences (slots [0, B)) -> logits (B, V).

        tokens and positions are (B,); the new keys and values are written at ``positions``;
        attention reads the first ``span`` (> max position) cache positions, masked per row.
        """
        batch = tokens.shape[0]
        rows = torch.arange(batch, device=tokens.device)
        hidden = self.base.embed_tokens(tokens[:, None])
        cos, sin = self.base.rotary_emb(hidden, positions[:, None])
        mask = (torch.arange(span, device=tokens.device) <= positions[:, None])[:, None, None]
        for index, layer in enumerate(self.layers):
            x = rms_norm(hidden, layer.input_norm)
            q, k, v = self._attention_inputs(layer, x, cos, sin)
            cache.k[index, rows, :, positions] = k[:, :, 0]
            cache.v[index, rows, :, positions] = v[:, :, 0]
            attended = F.scaled_dot_product_attention(
                q,
                cache.k[index, :batch, :, :span],
                cache.v[index, :batch, :, :span],
                attn_mask=mask,
                enable_gqa=True,
            )
            hidden = self._finish_layer(layer, hidden, attended)
        return self._logits(hidden[:, 0])
