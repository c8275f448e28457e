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

import torch
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
    for name, _, gather in weight_gathers(model):
        if names is None or name in names:
            yield name, gather()


def weight_layout(model: nn.Module) -> list[tuple[str, int]]:
    """(name, bytes of the full tensor) in iteration order, without gathering."""
    return [(name, nbytes) for name, nbytes, _ in weight_gathers(model)]


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


def weight_gathers(model: nn.Module) -> Iterator[tuple[str, int, Gather]]:
    """(name, bytes of the full tensor, how to gather it) of every weight, in order; the
    gathers are collectives over the ranks sharding it."""
    base = unwrap(model)
    lora_modules = dict(_lora_layers(base))
    seen: set[int] = set()
    for module_name, module in base.named_modules():
        if any(module_name.startswith(prefix + ".") for prefix in lora_modules):
            continue  # inside a LoRA module (its base layer, adapters, nested wrappers)
        if module_name in lora_modules:
            yield from _merged(module_name, module)
            continue
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
    if hasattr(module, "parameter_name"):  # LoRA on a parameter, not on a Linear
        yield from _merged_parameters(name, module)
        return
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


def _merged_parameters(name: str, wrapper: nn.Module) -> Iterator[tuple[str, int, Gather]]:
    """peft's ``ParamWrapper``: LoRA on a parameter of a module, one wrapper per parameter,
    nested (a mixture of experts' fused ``gate_up_proj`` and ``down_proj``, its router's
    ``weight``, as peft's all-linear targets them on transformers 5); then the innermost
    module's parameters no wrapper adapts."""
    adapted = set()
    while hasattr(wrapper, "parameter_name"):
        param = wrapper.get_param()
        adapted.add(wrapper.parameter_name)
        yield (
            f"{name}.{wrapper.parameter_name}",
            _nbytes(param),
            lambda wrapper=wrapper: _parameter_with_delta(wrapper),
        )
        wrapper = wrapper.base_layer
    for param_name, param in wrapper.named_parameters(recurse=False):
        if param_name not in adapted:
            yield f"{name}.{param_name}", _nbytes(param), lambda param=param: full_tensor(param)


def _parameter_with_delta(wrapper: nn.Module) -> Tensor:
    """W + the active adapters' deltas, from full (gathered) factors. One expert or a plain
    parameter: (alpha / r) B @ A. E experts (E, out, in) or (E, in, out): A (E r, in) and
    B (out, r E) hold each expert's factors, A_e = A.view(E, r, in)[e] and
    B_e = B.view(out, r, E)[..., e], and expert e's delta is (alpha / r) B_e @ A_e (in the
    parameter's own orientation), as peft computes it."""
    weight = full_tensor(wrapper.get_param()).clone()
    for adapter in wrapper.active_adapters:
        if adapter not in wrapper.lora_A:
            continue
        a = full_tensor(wrapper.lora_A[adapter].weight)
        b = full_tensor(wrapper.lora_B[adapter].weight)
        experts = wrapper.num_experts
        if experts == 1:
            delta = b @ a
            delta = delta.T if getattr(wrapper, "fan_in_fan_out", False) else delta
        else:
            a = a.reshape(experts, -1, a.shape[-1])  # (E, r, in)
            b = b.reshape(b.shape[0], -1, experts)  # (out, r, E)
            layout = "e o i" if wrapper._did_swap_in_out_features else "e i o"
            delta = torch.einsum(f"o r e, e r i -> {layout}", b, a)
        weight += (delta * wrapper.scaling[adapter]).to(weight.dtype)
    return weight
