"""Full (unsharded) weights, one tensor at a time: for the rollout engine and for export.

Every rank must iterate (each full tensor is an all-gather over the group); extra memory is
one full tensor (plus one LoRA product) at a time. Names are those of the transformers
model's own state dict, so a plain model with the same config loads them. LoRA adapters are
merged on the fly: W + (alpha / r) * B @ A; the sharded parameters are never modified.
"""

from collections.abc import Iterator

from torch import Tensor, nn

from ascent.engine.modules import unwrap


def full_tensor(tensor: Tensor) -> Tensor:
    """The whole tensor of a DTensor (an all-gather), or the tensor itself; detached."""
    full = getattr(tensor, "full_tensor", None)
    return (full() if callable(full) else tensor).detach()


def iter_full_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, full tensor) for every parameter of ``model`` (LoRA merged in, if any)."""
    base = unwrap(model)
    lora_modules = dict(_lora_layers(base))
    seen: set[int] = set()  # a tied weight (embedding = output head) is yielded once
    for module_name, module in base.named_modules():
        if module_name in lora_modules:
            yield from _merged(module_name, module)
            continue
        if any(module_name.startswith(prefix + ".") for prefix in lora_modules):
            continue  # the base layer and adapters inside a LoRA module: merged above
        for name, param in module.named_parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                yield (f"{module_name}.{name}" if module_name else name), full_tensor(param)


def _lora_layers(base: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


def _merged(name: str, module: nn.Module) -> Iterator[tuple[str, Tensor]]:
    weight = full_tensor(module.base_layer.weight).clone()
    for adapter in module.active_adapters:
        if adapter not in module.lora_A:
            continue
        a = full_tensor(module.lora_A[adapter].weight)
        b = full_tensor(module.lora_B[adapter].weight)
        weight += (b @ a).to(weight.dtype) * module.scaling[adapter]
    yield f"{name}.weight", weight
    if getattr(module.base_layer, "bias", None) is not None:
        yield f"{name}.bias", full_tensor(module.base_layer.bias)
