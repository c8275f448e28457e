"""Full (unsharded) weights, one tensor at a time: for the rollout engine and for export.

Every rank must iterate (each full tensor is an all-gather over the group); extra memory is
one full tensor (plus one LoRA product) at a time. Names are those of the transformers
model's own state dict, so a plain model with the same config loads them; a tied weight
(embedding = output head) is given once. LoRA adapters are merged on the fly:
W + (alpha / r) * B @ A; the sharded parameters are never modified.

``weight_layout`` lists the same names with their sizes without gathering anything, so the
weights can be cut into buckets of bounded size and sent bucket by bucket.
"""

from collections.abc import Callable, Iterator

from torch import Tensor, nn

from ascent.engine.modules import unwrap

Gather = Callable[[], Tensor]


def full_tensor(tensor: Tensor) -> Tensor:
    """The whole tensor of a DTensor (an all-gather), or the tensor itself; detached."""
    full = getattr(tensor, "full_tensor", None)
    return (full() if callable(full) else tensor).detach()


def iter_full_weights(
    model: nn.Module, names: set[str] | None = None
) -> Iterator[tuple[str, Tensor]]:
    """(name, full tensor) for every parameter of ``model`` (LoRA merged in), or for the
    ``names`` given (the others are not gathered)."""
    for name, _, gather in _weights(model):
        if names is None or name in names:
            yield name, gather()


def weight_layout(model: nn.Module) -> list[tuple[str, int]]:
    """(name, bytes of the full tensor) in iteration order, without gathering."""
    return [(name, nbytes) for name, nbytes, _ in _weights(model)]


def buckets(layout: list[tuple[str, int]], bucket_bytes: int) -> list[list[str]]:
    """Consecutive names in groups of at most ``bucket_bytes`` (a larger tensor goes alone)."""
    groups: list[list[str]] = []
    size = bucket_bytes
    for name, nbytes in layout:
        if size + nbytes > bucket_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    return groups


def _weights(model: nn.Module) -> Iterator[tuple[str, int, Gather]]:
    base = unwrap(model)
    lora_modules = dict(_lora_layers(base))
    seen: set[int] = set()
    for module_name, module in base.named_modules():
        if module_name in lora_modules:
            yield from _merged(module_name, module)
            continue
        if any(module_name.startswith(prefix + ".") for prefix in lora_modules):
            continue  # the base layer and adapters inside a LoRA module: merged above
        for name, param in module.named_parameters(recurse=False):
            if id(param) not in seen:
                seen.add(id(param))
                full_name = f"{module_name}.{name}" if module_name else name
                yield full_name, _nbytes(param), lambda param=param: full_tensor(param)


def _nbytes(param: Tensor) -> int:
    return param.numel() * param.element_size()  # DTensor: the global size


def _lora_layers(base: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


def _merged(name: str, module: nn.Module) -> Iterator[tuple[str, int, Gather]]:
    base_layer = module.base_layer

    def merged_weight() -> Tensor:
        weight = full_tensor(base_layer.weight).clone()
        for adapter in module.active_adapters:
            if adapter in module.lora_A:
                a = full_tensor(module.lora_A[adapter].weight)
                b = full_tensor(module.lora_B[adapter].weight)
                weight += (b @ a).to(weight.dtype) * module.scaling[adapter]
        return weight

    yield f"{name}.weight", _nbytes(base_layer.weight), merged_weight
    if getattr(base_layer, "bias", None) is not None:
        yield f"{name}.bias", _nbytes(base_layer.bias), lambda: full_tensor(base_layer.bias)
