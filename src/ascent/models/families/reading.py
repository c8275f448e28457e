"""Reading transformers' modules into the engine's pieces: what several families share
(their modules' attribute names follow Llama's), so that a family module says only where it
differs."""

from collections.abc import Callable

from torch import nn

from ascent.models.families.attention import AttentionKernel, HeadAttention
from ascent.models.families.blocks import (
    HalfRotation,
    Norm,
    activation,
    linear_of,
    model_rotary,
)
from ascent.models.families.decoder import Decoder, DecoderBlock
from ascent.models.families.feed_forward import FeedForward, GatedMLP

FeedForwardReader = Callable[[nn.Module, object], FeedForward]  # (decoder layer, config)
BlockReader = Callable[[nn.Module, object], DecoderBlock]  # (decoder layer, config)


def head_dim(config: object) -> int:
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def sliding_window(attention: nn.Module, config: object) -> int | None:
    """The window transformers' mask gives this layer: the attention module's own
    ``sliding_window`` where it keeps one per layer (Qwen2/3, Gemma 3), else the config's
    (Mistral, Phi-3: every layer, when set)."""
    if hasattr(attention, "sliding_window"):
        return attention.sliding_window
    return getattr(config, "sliding_window", None)


def kernel_of(attention: nn.Module, config: object) -> AttentionKernel:
    """The scale transformers' attention module uses, and its layer's window."""
    return AttentionKernel(scale=attention.scaling, window=sliding_window(attention, config))


def head_attention(attention: nn.Module, config: object, **variant: object) -> HeadAttention:
    """q/k/v/o projections (with their biases, if any) and per-head q/k norms where the
    module has them (Qwen3)."""
    norms = {}
    if hasattr(attention, "q_norm"):
        norms = {"q_norm": Norm.of(attention.q_norm), "k_norm": Norm.of(attention.k_norm)}
    return HeadAttention(
        qkv=tuple(linear_of(getattr(attention, f"{x}_proj")) for x in "qkv"),
        o=linear_of(attention.o_proj),
        heads=config.num_attention_heads,
        kv_heads=config.num_key_value_heads,
        head_dim=head_dim(config),
        kernel=kernel_of(attention, config),
        **(norms | variant),
    )


def gated_mlp(mlp: nn.Module, config: object) -> GatedMLP:
    """gate/up/down projections without biases, with the config's activation."""
    if getattr(mlp.gate_proj, "bias", None) is not None:
        raise ValueError("MLP biases are not supported by the native engine")
    act = activation(getattr(config, "hidden_act", None) or config.hidden_activation)
    return GatedMLP(mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, act)


def dense_feed_forward(layer: nn.Module, config: object) -> FeedForward:
    return gated_mlp(layer.mlp, config)


def pre_norm_block(
    layer: nn.Module, config: object, feed_forward: FeedForwardReader
) -> DecoderBlock:
    """Llama's layer: RMSNorm -> attention, RMSNorm -> feed-forward, each added back."""
    return DecoderBlock(
        attention=head_attention(layer.self_attn, config),
        feed_forward=feed_forward(layer, config),
        pre_attention=Norm.of(layer.input_layernorm),
        pre_feed_forward=Norm.of(layer.post_attention_layernorm),
    )


def decoder_of(
    model: nn.Module,
    text_model: nn.Module,
    block: BlockReader,
    final_norm: Callable[[nn.Module], Norm] = Norm.of,
    rotation: type = HalfRotation,
) -> Decoder:
    """A decoder whose layers ``block`` reads: ``text_model`` holds the embedding, the
    layers, the final norm and the rotary module (its tables in ``rotation``'s layout);
    ``model`` the output head."""
    config = text_model.config
    return Decoder(
        embed=text_model.embed_tokens,
        rotary=model_rotary(text_model.rotary_emb, rotation),
        layers=[block(layer, config) for layer in text_model.layers],
        final_norm=final_norm(text_model.norm),
        head=model.lm_head.weight,
    )


def pre_norm_decoder(
    model: nn.Module, text_model: nn.Module, feed_forward: FeedForwardReader = dense_feed_forward
) -> Decoder:
    """A decoder of Llama-style layers (``pre_norm_block``)."""
    return decoder_of(
        model, text_model, lambda layer, config: pre_norm_block(layer, config, feed_forward)
    )
