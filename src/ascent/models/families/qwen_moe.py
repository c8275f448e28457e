"""Qwen's mixtures of experts: Qwen3-MoE (top-k of E SiLU-gated experts, softmax routing) and
Qwen2-MoE (the same plus a shared expert behind a sigmoid gate). Layers as Llama's; the
dense layers a config lists (``mlp_only_layers``, ``decoder_sparse_step``) keep an MLP.
Router replay uses the routers' softmax (the spec's default)."""

from torch import nn

from ascent.models.families.blocks import activation
from ascent.models.families.decoder import Decoder
from ascent.models.families.feed_forward import Experts, FeedForward, SharedExperts, SoftmaxTopK
from ascent.models.families.reading import gated_mlp, pre_norm_decoder
from ascent.models.families.spec import ModelFamily
from ascent.models.families.tensor_plan import pre_norm_plan


def feed_forward(layer: nn.Module, config: object) -> FeedForward:
    mlp = layer.mlp
    if not hasattr(mlp, "experts"):
        return gated_mlp(mlp, config)
    routed = Experts(
        routing=SoftmaxTopK(mlp.gate.weight, mlp.gate.top_k, bool(mlp.gate.norm_topk_prob)),
        gate_up=mlp.experts.gate_up_proj,
        down=mlp.experts.down_proj,
        act=activation(config.hidden_act),
    )
    if not hasattr(mlp, "shared_expert"):
        return routed
    return SharedExperts(
        routed, gated_mlp(mlp.shared_expert, config), mlp.shared_expert_gate.weight
    )


def read(model: nn.Module) -> Decoder:
    return pre_norm_decoder(model, model.model, feed_forward)


FAMILY = ModelFamily(
    name="qwen_moe",
    model_types=("qwen2_moe", "qwen3_moe"),
    read=read,
    tensor_parallel_plan=pre_norm_plan,
)
