"""DeepSeek-V3 (and its smaller kin on the same architecture): multi-head latent attention
and a mixture of experts with grouped top-k routing.

- Attention is MLA (``LatentAttention``): queries through a low-rank projection (q_a, its
  RMSNorm, q_b) or one projection, keys and values from a compressed latent of
  ``kv_lora_rank`` dims plus one shared rotary key of ``qk_rope_head_dim``; the paged cache
  keeps the compressed form. Rotary pairs are interleaved (``rope_interleave``) or halves;
  YaRN's scale is in the attention module's own ``scaling``.
- Layers before ``first_k_dense_replace`` have a dense SiLU-gated MLP; the others route each
  token to k of E experts (``GroupedSigmoidTopK``: sigmoid scores, a correction bias for the
  choice, groups) and add ``n_shared_experts`` shared ones, as one MLP.
- Routes are recorded and replayed as for Qwen-MoE; a replayed router weighs its experts by
  their sigmoid scores (``router_weights``), renormalised and scaled as the router does.
"""

from functools import partial

from torch import Tensor, nn

from ascent.models.families.attention import LatentAttention
from ascent.models.families.blocks import (
    NO_NORM,
    HalfRotation,
    Norm,
    PairRotation,
    activation,
    linear_of,
)
from ascent.models.families.decoder import Decoder, DecoderBlock
from ascent.models.families.feed_forward import (
    Experts,
    FeedForward,
    GroupedSigmoidTopK,
    SharedExperts,
)
from ascent.models.families.reading import decoder_of, gated_mlp, kernel_of
from ascent.models.families.spec import ModelFamily, TrainingHooks
from ascent.models.families.tensor_plan import latent_attention_plan, pre_norm_plan


def attention_of(attention: nn.Module, config: object) -> LatentAttention:
    if attention.q_lora_rank is None:
        q, q_norm = (linear_of(attention.q_proj),), NO_NORM
    else:
        q = (linear_of(attention.q_a_proj), linear_of(attention.q_b_proj))
        q_norm = Norm.of(attention.q_a_layernorm)
    return LatentAttention(
        q=q,
        q_norm=q_norm,
        kv_a=linear_of(attention.kv_a_proj_with_mqa),
        kv_norm=Norm.of(attention.kv_a_layernorm),
        kv_b=attention.kv_b_proj.weight,
        o=linear_of(attention.o_proj),
        heads=config.num_attention_heads,
        latent=config.kv_lora_rank,
        nope_dim=config.qk_nope_head_dim,
        rope_dim=config.qk_rope_head_dim,
        value_dim=config.v_head_dim,
        kernel=kernel_of(attention, config),
    )


def feed_forward(layer: nn.Module, config: object) -> FeedForward:
    mlp = layer.mlp
    if not hasattr(mlp, "experts"):
        return gated_mlp(mlp, config)
    router = mlp.gate
    routing = GroupedSigmoidTopK(
        router=router.weight,
        bias=router.e_score_correction_bias,
        top_k=router.top_k,
        groups=router.num_group,
        top_groups=router.topk_group,
        normalize=bool(router.norm_topk_prob),
        scale=float(router.routed_scaling_factor),
    )
    experts = mlp.experts
    routed = Experts(
        routing, experts.gate_up_proj, experts.down_proj, activation(config.hidden_act)
    )
    return SharedExperts(routed, gated_mlp(mlp.shared_experts, config))


def block(layer: nn.Module, config: object) -> DecoderBlock:
    return DecoderBlock(
        attention=attention_of(layer.self_attn, config),
        feed_forward=feed_forward(layer, config),
        pre_attention=Norm.of(layer.input_layernorm),
        pre_feed_forward=Norm.of(layer.post_attention_layernorm),
    )


def read(model: nn.Module) -> Decoder:
    style = PairRotation if model.config.rope_interleave else HalfRotation
    return decoder_of(model, model.model, block, rotation=style)


def sigmoid_router_weights(router: nn.Module, logits: Tensor, experts: Tensor) -> Tensor:
    """The weights a DeepSeek-V3 router gives ``experts`` (N, k): their sigmoid scores,
    divided by their sum (+1e-20) when it normalises its top-k, times its scaling factor."""
    weights = logits.float().sigmoid().gather(1, experts)
    if router.norm_topk_prob:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return (weights * router.routed_scaling_factor).to(logits.dtype)


FAMILY = ModelFamily(
    name="deepseek_v3",
    model_types=("deepseek_v3",),
    read=read,
    training=TrainingHooks(router_weights=sigmoid_router_weights),
    tensor_parallel_plan=partial(pre_norm_plan, attention=latent_attention_plan),
)
