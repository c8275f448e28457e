"""Tensor-parallel plans: how a family's decoder shards over the mesh's tp axis, as PyTorch
``parallelize_module`` styles keyed by module name (relative to the decoder stack, the
transformers model's ``base_model``: ``embed_tokens``, ``layers``, ``norm``).

The layout, Megatron's with sequence-parallel norms (as torchtitan's Llama plan), for T
ranks and a micro-batch of N tokens (N a multiple of T: ``ascent.engine.tensor_parallel``
pads it):

    embedding       vocabulary rows split (Shard 0); output all-reduced: (B, N, H) on every rank
    layer 0 input   cut by sequence: rank t keeps tokens [t N/T, (t+1) N/T)
    norms           on the rank's N/T tokens (weights replicated, gradients summed over T)
    attention       input all-gathered to N tokens; q, k, v column-split (H/T query heads,
                    G/T key/value heads per rank); o row-split, reduce-scattered back to
                    N/T tokens
    MLP             the same: gate and up column-split, down row-split
    final norm      on N/T tokens; ``PolicyModule`` gathers the N hidden states and scores
                    them against its vocabulary rows of the head (``ascent.engine.vocab_parallel``)

Per-head parameters inside attention (Qwen3's and Gemma 3's q/k norms over head_dim) see
only the rank's heads: they are replicated and their gradients summed over T, as a norm's
(the head axis plays the sequence axis's part). A q/k norm over the whole projection
(OLMo 2's) is split with it, its mean of squares summed over the ranks
(``SplitFeatureRMSNorm``). A mixture-of-experts block runs whole on
every tensor rank (its input all-gathered, its output cut by sequence again): experts
split over the ``ep`` axis instead, and a shared expert is column/row split.

Every family whose attention projects q, k, v and o separately and whose MLP is gated
(gate, up, down) uses ``pre_norm_plan``; DeepSeek-V3's latent attention (MLA) uses it with
``latent_attention_plan``. A family with fused projections (Phi-3's ``qkv_proj``: a column
split would give one rank all of q) declares none, and tensor parallelism refuses it by
name.
"""

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.nn.functional import all_reduce as differentiable_all_reduce
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
)

# Module name -> its style, or styles applied in order (an input's and an output's).
Plan = dict[str, ParallelStyle | tuple[ParallelStyle, ...]]
AttentionPlan = Callable[[nn.Module, str], Plan]

NORMS = ("RMSNorm", "LayerNorm")


def is_norm(module: nn.Module) -> bool:
    return type(module).__name__.endswith(NORMS)


def gathered_input(keyword: str | None = None) -> PrepareModuleInput:
    """A module whose input arrives cut by sequence and that needs every token."""
    if keyword is None:
        return PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        )
    return PrepareModuleInput(
        input_kwarg_layouts={keyword: Shard(1)},
        desired_input_kwarg_layouts={keyword: Replicate()},
        use_local_output=True,
    )


def column_row(columns: tuple[str, ...], row: str, prefix: str, output: Shard | Replicate) -> Plan:
    """``columns`` split by output feature, ``row`` by input feature, its output reduced to
    ``output`` (Shard(1): reduce-scattered by sequence; Replicate(): all-reduced)."""
    plan: Plan = {f"{prefix}{name}": ColwiseParallel() for name in columns}
    plan[f"{prefix}{row}"] = RowwiseParallel(output_layouts=output)
    return plan


class SplitFeatureRMSNorm(ParallelStyle):
    """An RMSNorm over features a column-split layer left split over the tensor ranks (OLMo
    2's q/k norms over all heads at once): its weight split likewise (rows), and

        y_t = w_t x_t / sqrt(Σ_ranks Σ x² / F + eps)

    with the sum of squares all-reduced (its backward all-reduces too: every rank's outputs
    depend on it). In float32, cast back, as the family's norm."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        features, epsilon = module.weight.shape[0], module.variance_epsilon
        split = distribute_tensor(module.weight.data, device_mesh, [Shard(0)], src_data_rank=None)
        module.register_parameter("weight", nn.Parameter(split))
        group = device_mesh.get_group()

        def forward(hidden: Tensor) -> Tensor:
            x = hidden.float()
            squares = differentiable_all_reduce(x.square().sum(-1, keepdim=True), group=group)
            normed = x * torch.rsqrt(squares / features + epsilon)
            return (module.weight.to_local() * normed).to(hidden.dtype)

        module.forward = forward
        return module


def attention_plan(attention: nn.Module, prefix: str) -> Plan:
    plan = {prefix.rstrip("."): gathered_input("hidden_states")}
    plan |= column_row(("q_proj", "k_proj", "v_proj"), "o_proj", prefix, Shard(1))
    for name in ("q_norm", "k_norm"):
        norm = getattr(attention, name, None)
        if norm is None:
            continue
        if norm.weight.shape[0] == attention.head_dim:  # per head, on (B, N, heads / T, D)
            plan[prefix + name] = SequenceParallel(sequence_dim=2, use_local_output=True)
        else:  # over the whole projection, split by its column split
            plan[prefix + name] = SplitFeatureRMSNorm()
    return plan


class _SumGradientColumns(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, start: int, group: Any) -> Tensor:
        ctx.start, ctx.group = start, group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple:
        grad = grad.clone()
        columns = grad[..., ctx.start :].contiguous()
        dist.all_reduce(columns, group=ctx.group)
        grad[..., ctx.start :] = columns
        return grad, None, None


class SummedGradientColumns(ParallelStyle):
    """A replicated module whose output columns [start:] every tensor rank's heads read alike
    (MLA's rotary key, shared by all heads): the forward is unchanged, and their gradient,
    which each rank collects from its own heads only, is summed over the ranks. (The other
    columns reach the heads through a column-split layer, whose input gradient is summed
    already.)"""

    def __init__(self, start: int) -> None:
        super().__init__()
        self.start = start

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        group, start = device_mesh.get_group(), self.start
        module.register_forward_hook(
            lambda _module, _inputs, out: _SumGradientColumns.apply(out, start, group)
        )
        return module


def latent_attention_plan(attention: nn.Module, prefix: str) -> Plan:
    """DeepSeek-V3's multi-head latent attention: the low-rank projections into the latents
    (q_a, kv_a and their norms) stay whole on every rank; the projections out of them into
    heads (q_b or q, kv_b) are column-split and o row-split, as for plain attention."""
    plan = {prefix.rstrip("."): gathered_input("hidden_states")}
    query = "q_b_proj" if hasattr(attention, "q_b_proj") else "q_proj"
    plan |= column_row((query, "kv_b_proj"), "o_proj", prefix, Shard(1))
    plan[prefix + "kv_a_proj_with_mqa"] = SummedGradientColumns(attention.kv_lora_rank)
    return plan


def gated_mlp_plan(prefix: str) -> Plan:
    plan = {prefix.rstrip("."): gathered_input()}
    return plan | column_row(("gate_proj", "up_proj"), "down_proj", prefix, Shard(1))


def whole_block_plan(block: nn.Module, prefix: str) -> Plan:
    """A block that runs on every token of every tensor rank (a mixture of experts): its
    input gathered, its output cut by sequence again; a shared expert inside is split."""
    plan: Plan = {
        prefix.rstrip("."): (
            gathered_input(),
            PrepareModuleOutput(output_layouts=Replicate(), desired_output_layouts=Shard(1)),
        )
    }
    for name in ("shared_expert", "shared_experts"):  # Qwen2-MoE's, DeepSeek's
        if hasattr(block, name):
            shared = f"{prefix}{name}."
            plan |= column_row(("gate_proj", "up_proj"), "down_proj", shared, Replicate())
    return plan


def pre_norm_layer(layer: nn.Module, prefix: str, attention: AttentionPlan) -> Plan:
    """A decoder layer of attention and a gated MLP (or experts), with its norms."""
    plan: Plan = {
        f"{prefix}{name}": SequenceParallel(use_local_output=True)
        for name, child in layer.named_children()
        if is_norm(child)
    }
    plan |= attention(layer.self_attn, f"{prefix}self_attn.")
    mlp = layer.mlp
    if hasattr(mlp, "experts"):
        return plan | whole_block_plan(mlp, f"{prefix}mlp.")
    return plan | gated_mlp_plan(f"{prefix}mlp.")


def pre_norm_plan(model: nn.Module, attention: AttentionPlan = attention_plan) -> Plan:
    """The plan of ``model`` (a transformers causal LM or token classifier) over its decoder
    stack ``model.base_model`` (module docstring), its attention split by ``attention``."""
    stack = model.base_model
    plan: Plan = {
        "embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "layers.0": PrepareModuleInput(
            input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),), use_local_output=True
        ),
        "norm": SequenceParallel(),  # a DTensor cut by sequence: the module gathers it
    }
    for index, layer in enumerate(stack.layers):
        plan |= pre_norm_layer(layer, f"layers.{index}.", attention)
    return plan
