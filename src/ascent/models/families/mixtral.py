"""Mixtral (8x7B, 8x22B): Mistral's layers with every MLP a mixture of 8 SiLU-gated experts.
Its router keeps a token's top 2 of softmax(x @ router^T) and always renormalises them, in
float32 (the weights stay float32, where Qwen's cast back); a replayed router weighs its
experts the same way."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ascent.models.families.blocks import activation
from ascent.models.families.decoder import Decoder
from ascent.models.families.feed_forward import Experts
from ascent.models.families.reading import pre_norm_decoder
from ascent.models.families.spec import ModelFamily, TrainingHooks
from ascent.models.families.tensor_plan import pre_norm_plan


@dataclass(frozen=True)
class MixtralRouting:
    """Weights (N, k) float32 and experts (N, k) of tokens x (N, H); router (E, H)."""

    router: Tensor
    top_k: int

    @property
    def experts(self) -> int:
        return self.router.shape[0]

    def __call__(self, x: Tensor) -> tuple[Tensor, Tensor]:
        probs = torch.softmax(F.linear(x, self.router).float(), dim=-1)
        top, experts = torch.topk(probs, self.top_k, dim=-1)
        return top / top.sum(dim=-1, keepdim=True), experts


def feed_forward(layer: nn.Module, config: object) -> Experts:
    mlp = layer.mlp
    routing = MixtralRouting(mlp.gate.weight, mlp.gate.top_k)
    act = activation(config.hidden_act)
    return Experts(routing, mlp.experts.gate_up_proj, mlp.experts.down_proj, act)


def read(model: nn.Module) -> Decoder:
    return pre_norm_decoder(model, model.model, feed_forward)


def router_weights(router: nn.Module, logits: Tensor, experts: Tensor) -> Tensor:
    """The given experts' softmax probabilities, renormalised over the k (float32)."""
    weights = torch.softmax(logits.float(), dim=-1).gather(1, experts)
    return weights / weights.sum(dim=-1, keepdim=True)


FAMILY = ModelFamily(
    name="mixtral",
    model_types=("mixtral",),
    read=read,
    training=TrainingHooks(router_weights=router_weights),
    tensor_parallel_plan=pre_norm_plan,
)
