"""A Tinker ``lora_config`` (rank, seed, train_attn, train_mlp, train_unembed) as ascent's
LoRA settings: adapters of the client's rank on the attention projections, the MLP
projections and the output head (the unembedding), each switch on by default as in the SDK.

The head's adapter trains through the engine's chunked log-prob head, which scores with
W + (alpha / r) B A (``ascent.engine.modules.head_weight``). A head tied to the input
embedding keeps its weights: one tensor is both, so its merged export could not hold an
adapter on the head alone.
"""

from torch import nn

from ascent.engine.config import LoraSettings
from ascent.service.wire import WireError

# Module names (as peft matches them: by suffix) of the switches over the decoder layers.
LAYER_TARGETS = {
    "train_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "train_mlp": ("gate_proj", "up_proj", "down_proj"),
}


def untied_head_name(model: nn.Module) -> str | None:
    """The output head's module name, or None when it is tied to the input embedding."""
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or head.weight is getattr(embedding, "weight", None):
        return None
    return next(name for name, module in model.named_modules() if module is head)


def lora_settings(lora: dict, alpha: float, model: nn.Module) -> LoraSettings:
    """peft's settings for ``lora`` (the create_model request's ``lora_config``) on
    ``model``; a WireError when they would train nothing."""
    targets = [
        name for switch, names in LAYER_TARGETS.items() if lora.get(switch, True) for name in names
    ]
    head = untied_head_name(model)
    if lora.get("train_unembed", True) and head is not None:
        targets.append(head)
    if not targets:
        raise WireError(
            "lora_config trains nothing: set train_attn, train_mlp or train_unembed (an "
            "untied head)"
        )
    return LoraSettings(rank=lora["rank"], alpha=alpha, target_modules=targets)
