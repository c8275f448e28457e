"""OLMo 2: Llama's attention and MLP with the norms moved after each half (on the
attention's and the MLP's outputs, before the residual add; none before), and q/k RMSNorm
over the whole projection rather than per head. Its norms scale in float32 before the cast
back (the same in float32)."""

from functools import partial

from torch import nn

from ascent.models.families.blocks import Norm
from ascent.models.families.decoder import Decoder, DecoderBlock
from ascent.models.families.reading import decoder_of, gated_mlp, head_attention
from ascent.models.families.spec import ModelFamily
from ascent.models.families.tensor_plan import pre_norm_plan

norm = partial(Norm.of, scale_in_float=True)


def block(layer: nn.Module, config: object) -> DecoderBlock:
    attention = layer.self_attn
    return DecoderBlock(
        attention=head_attention(
            attention,
            config,
            q_norm=norm(attention.q_norm),
            k_norm=norm(attention.k_norm),
            norm_per_head=False,
        ),
        feed_forward=gated_mlp(layer.mlp, config),
        post_attention=norm(layer.post_attention_layernorm),
        post_feed_forward=norm(layer.post_feedforward_layernorm),
    )


def read(model: nn.Module) -> Decoder:
    return decoder_of(model, model.model, block, final_norm=norm)


FAMILY = ModelFamily(
    name="olmo2", model_types=("olmo2",), read=read, tensor_parallel_plan=pre_norm_plan
)
