"""Llama and the families that share its layer: Llama 2/3.x (Llama 3's rope scaling comes
from the model's own rotary module), Mistral (its sliding window), Qwen2 (q/k/v biases),
Qwen3 (per-head q/k RMSNorm). RMSNorm before attention and before a SiLU-gated MLP."""

from torch import nn

from ascent.models.families.decoder import Decoder
from ascent.models.families.reading import pre_norm_decoder
from ascent.models.families.spec import ModelFamily
from ascent.models.families.tensor_plan import pre_norm_plan


def read(model: nn.Module) -> Decoder:
    return pre_norm_decoder(model, model.model)


FAMILY = ModelFamily(
    name="llama",
    model_types=("llama", "mistral", "qwen2", "qwen3"),
    read=read,
    tensor_parallel_plan=pre_norm_plan,
)
