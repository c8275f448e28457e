"""Tensor parallelism: a model's layers split over the mesh's tp axis by its family's plan
(``ascent.models.families.tensor_plan``), before FSDP2 shards each split over the other axes.

What the engine adds to the family's plan:

- the final norm's output is gathered (all tokens on every rank, a plain tensor), so any
  head reads it: the policy's vocabulary-split head (``ascent.engine.vocab_parallel``), a
  critic's or reward model's score layer (replicated: every rank computes the same);
- the output head is split by vocabulary rows like the embedding, or stays tied to it (the
  split re-creates the embedding's parameter, so the tie is made again);
- LoRA: a split layer's adapters follow it. Column-split W: A stays whole (it reads the
  whole input), B is column-split, so B A x comes out split like W x. Row-split W: A is
  row-split and reduced like W (to tokens cut by sequence, or all-reduced), B then acts on
  that, its weight replicated and its gradient summed over the ranks.

The layers cut a micro-batch by sequence into equal parts: its length must be a multiple
of the tensor ranks (``PackedSequences.with_filler``).
"""

from collections.abc import Callable

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleOutput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from ascent.engine.modules import unwrap

# A family's plan: the model -> {module name under its decoder stack: style(s)}.
TensorPlan = Callable[[nn.Module], dict]


def parallelize(model: nn.Module, mesh: DeviceMesh, family_plan: TensorPlan) -> None:
    """Split ``model`` (a transformers model, possibly inside a peft wrapper) over ``mesh``
    (the tp axis) by its family's plan (``ModelFamily.tensor_parallel_plan``) and the
    module docstring's additions."""
    lm = unwrap(model)
    stack = lm.base_model
    plan = dict(family_plan(lm))
    plan["norm"] = (plan["norm"], gathered_output())
    # A style makes new parameters, trainable by default: a frozen weight (LoRA's base, a
    # reference) must stay frozen.
    frozen = {name for name, param in lm.named_parameters() if not param.requires_grad}
    for name, styles in plan.items():
        if not _holds(stack, name):
            continue  # a pipeline stage without it (the embedding lives on the first)
        for style in styles if isinstance(styles, tuple) else (styles,):
            apply_style(stack.get_submodule(name), mesh, style)
    _split_head(lm, mesh)
    for name, param in lm.named_parameters():
        param.requires_grad_(name not in frozen)


def _holds(stack: nn.Module, name: str) -> bool:
    """Whether ``stack`` has a module at ``name`` (a pipeline stage drops the embedding
    of the later stages; their final norm is an identity, still gathered to the next)."""
    try:
        stack.get_submodule(name)
    except AttributeError:
        return False
    return True


def gathered_output() -> ParallelStyle:
    """The tokens cut by sequence -> all of them, a plain tensor on every rank."""
    return PrepareModuleOutput(
        output_layouts=Shard(1), desired_output_layouts=Replicate(), use_local_output=True
    )


def _split_head(lm: nn.Module, mesh: DeviceMesh) -> None:
    head, embedding = lm.get_output_embeddings(), lm.get_input_embeddings()
    if head is None:
        return  # a score head (critic, reward model): replicated, it reads gathered tokens
    tied = embedding is not None and head.weight is embedding.weight
    if tied or getattr(lm.config, "tie_word_embeddings", False):
        head.weight = embedding.weight  # the embedding's split parameter, tied again
        return
    # Its weight is split by vocabulary rows; its forward never runs (PolicyModule scores
    # the hidden states against the rows itself).
    apply_style(head, mesh, ColwiseParallel())


def apply_style(module: nn.Module, mesh: DeviceMesh, style: ParallelStyle) -> None:
    """``style`` on ``module``, or on a LoRA layer's base layer and adapters (module
    docstring). Every rank loaded the same weights: each keeps its own piece, nothing is
    sent (``src_data_rank=None``)."""
    if not hasattr(module, "lora_A"):
        parallelize_module(module, mesh, style, src_data_rank=None)
        return
    if hasattr(module, "parameter_name"):
        raise ValueError(
            f"parallel.tensor > 1 with LoRA on a parameter ({type(module).__name__}) is not "
            "split yet; target linear layers only (model.lora.target_modules)"
        )
    parallelize_module(module.base_layer, mesh, style, src_data_rank=None)
    for adapter in module.lora_A:
        a, b = module.lora_A[adapter], module.lora_B[adapter]
        if isinstance(style, ColwiseParallel):
            parallelize_module(b, mesh, ColwiseParallel(), src_data_rank=None)
        elif isinstance(style, RowwiseParallel):
            (output,) = style.output_layouts
            parallelize_module(a, mesh, RowwiseParallel(output_layouts=output), src_data_rank=None)
            if isinstance(output, Shard):
                parallelize_module(
                    b, mesh, SequenceParallel(use_local_output=True), src_data_rank=None
                )
        else:
            raise ValueError(
                f"parallel.tensor > 1: LoRA on a {type(module.base_layer).__name__} split by "
                f"{type(style).__name__} is not supported; leave it out of "
                "model.lora.target_modules"
            )
