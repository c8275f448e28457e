"""Gemma 3 text (``Gemma3ForCausalLM``; the 270M and 1B checkpoints, and the language model
of the larger ones).

- Layers alternate sliding-window attention (``sliding_window`` keys back) and global
  attention (``layer_types``), each kind with its own RoPE base (``rope_parameters`` per
  layer type: 10k local, 1M global with its scaling): the rotary module gives one table per
  kind, and a layer rotates with its own.
- Norms are RMSNorms of weight 1 + w, in float32: before and after attention, before and
  after the MLP (four per layer), and per head on q and k.
- Scores are scaled by query_pre_attn_scalar^-1/2, not head_dim^-1/2.
- Embeddings are multiplied by sqrt(hidden) (the model's own embedding module does it, in
  the weights' dtype); the head is tied to them.
- The MLP's activation is gelu with the tanh approximation.
- Logits are soft-capped (cap * tanh(logits / cap)) where the config sets
  ``final_logit_softcapping``.

Not run natively (refused, naming the field): attention-logit soft-capping and
bidirectional attention.
"""

from collections.abc import Callable
from functools import partial

from torch import Tensor, nn

from ascent.models.families.blocks import HalfRotation, Norm, Rotations
from ascent.models.families.decoder import Decoder, DecoderBlock
from ascent.models.families.reading import gated_mlp, head_attention
from ascent.models.families.spec import ModelFamily
from ascent.models.families.tensor_plan import pre_norm_plan

norm = partial(Norm.of, offset=1.0, scale_in_float=True)


def block(layer: nn.Module, config: object) -> DecoderBlock:
    attention = layer.self_attn
    return DecoderBlock(
        attention=head_attention(
            attention,
            config,
            q_norm=norm(attention.q_norm),
            k_norm=norm(attention.k_norm),
            rotation=attention.layer_type,
        ),
        feed_forward=gated_mlp(layer.mlp, config),
        pre_attention=norm(layer.input_layernorm),
        post_attention=norm(layer.post_attention_layernorm),
        pre_feed_forward=norm(layer.pre_feedforward_layernorm),
        post_feed_forward=norm(layer.post_feedforward_layernorm),
    )


def rotary(rotary_emb: nn.Module, layer_types: list[str]) -> Callable:
    """One rotation per layer type, each from the rotary module's tables for that type."""

    def rotations(hidden: Tensor, positions: Tensor) -> Rotations:
        return {
            kind: HalfRotation.of(*rotary_emb(hidden, positions, kind))
            for kind in dict.fromkeys(layer_types)
        }

    return rotations


def read(model: nn.Module) -> Decoder:
    config, text = model.config, model.model
    for field in ("attn_logit_softcapping", "use_bidirectional_attention"):
        if getattr(config, field, None):
            raise ValueError(f"{field}={getattr(config, field)} is not run by the native engine")
    return Decoder(
        embed=text.embed_tokens,
        rotary=rotary(text.rotary_emb, config.layer_types),
        layers=[block(layer, config) for layer in text.layers],
        final_norm=norm(text.norm),
        head=model.lm_head.weight,
        final_softcap=config.final_logit_softcapping,
    )


FAMILY = ModelFamily(
    name="gemma3", model_types=("gemma3_text",), read=read, tensor_parallel_plan=pre_norm_plan
)
