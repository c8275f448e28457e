"""Expert tensors under a checkpoint's names.

transformers 5 holds a Qwen3-MoE layer's experts fused, ``mlp.experts.gate_up_proj``
(E, 2I, H) and ``mlp.experts.down_proj`` (E, H, I), but saves and loads checkpoints with one
tensor per expert and projection, ``mlp.experts.{e}.gate_proj.weight`` (I, H),
``up_proj.weight`` (I, H), ``down_proj.weight`` (H, I), as the released checkpoints are
written. A server that loads weights by checkpoint name (vLLM) silently skips the fused
names, so the experts would keep their old weights.
"""

from collections.abc import Iterable, Iterator

from torch import Tensor

FUSED_GATE_UP = ".experts.gate_up_proj"
FUSED_DOWN = ".experts.down_proj"


def per_expert_names(named_tensors: Iterable[tuple[str, Tensor]]) -> Iterator[tuple[str, Tensor]]:
    """``named_tensors`` with each fused expert tensor split into the checkpoint's per-expert
    tensors (views, no copies); every other tensor as it is. gate_up_proj[e] is the gate
    projection's I rows followed by the up projection's, as the fused forward splits it."""
    for name, tensor in named_tensors:
        if name.endswith(FUSED_GATE_UP) and tensor.dim() == 3:
            prefix, half = name[: -len("gate_up_proj")], tensor.shape[1] // 2
            for expert in range(tensor.shape[0]):
                yield f"{prefix}{expert}.gate_proj.weight", tensor[expert, :half]
                yield f"{prefix}{expert}.up_proj.weight", tensor[expert, half:]
        elif name.endswith(FUSED_DOWN) and tensor.dim() == 3:
            prefix = name[: -len("down_proj")]
            for expert in range(tensor.shape[0]):
                yield f"{prefix}{expert}.down_proj.weight", tensor[expert]
        else:
            yield name, tensor


# Where a checkpoint's config.json states the number of routed experts, by family.
EXPERT_COUNT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")


def expert_count(model_config: dict) -> int:
    """Routed experts per sparse layer that a config.json declares; 0 for a dense model.
    A vision-language config's text model counts (``text_config``)."""
    for key in EXPERT_COUNT_KEYS:
        if model_config.get(key):
            return int(model_config[key])
    text = model_config.get("text_config")
    return expert_count(text) if isinstance(text, dict) else 0
