"""Phi-3 and Phi-4 (mini): Llama's layer with fused weights, q/k/v in one ``qkv_proj`` and
gate/up in one ``gate_up_proj`` (split at call time, so refreshed weights are read whole),
partial rotary where the config's ``partial_rotary_factor`` is below 1 (the rotary
module's tables are narrower than a head; the rest passes unrotated), and a sliding window
on every layer when the config sets one. Long-context rope scaling (``longrope``) comes from
the model's rotary module; it picks its long factors from the positions of the pass it is
given, as transformers' does for one forward."""

from torch import nn

from ascent.models.families.attention import HeadAttention
from ascent.models.families.blocks import Norm, activation, linear_of
from ascent.models.families.decoder import Decoder, DecoderBlock
from ascent.models.families.feed_forward import FusedGatedMLP
from ascent.models.families.reading import decoder_of, head_dim, kernel_of
from ascent.models.families.spec import ModelFamily


def block(layer: nn.Module, config: object) -> DecoderBlock:
    attention, mlp = layer.self_attn, layer.mlp
    return DecoderBlock(
        attention=HeadAttention(
            qkv=(linear_of(attention.qkv_proj),),
            o=linear_of(attention.o_proj),
            heads=config.num_attention_heads,
            kv_heads=config.num_key_value_heads,
            head_dim=head_dim(config),
            kernel=kernel_of(attention, config),
        ),
        feed_forward=FusedGatedMLP(
            mlp.gate_up_proj.weight, mlp.down_proj.weight, activation(config.hidden_act)
        ),
        pre_attention=Norm.of(layer.input_layernorm),
        pre_feed_forward=Norm.of(layer.post_attention_layernorm),
    )


def read(model: nn.Module) -> Decoder:
    return decoder_of(model, model.model, block)


FAMILY = ModelFamily(name="phi3", model_types=("phi3",), read=read)
