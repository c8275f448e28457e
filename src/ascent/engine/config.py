"""Settings of the training engine: model, LoRA, optimiser, FSDP2. Typed and documented
field by field; unknown fields are errors."""

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Strict(BaseModel):
    """Base of every ascent config: unknown keys are errors, values are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LoraSettings(Strict):
    """LoRA adapters through peft; only adapter weights train."""

    rank: int = Field(16, gt=0, description="Rank r of the low-rank update B @ A.")
    alpha: float = Field(32.0, gt=0, description="Scale numerator: the update is (alpha / r) B A.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout on the adapter input.")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Linear layers that get adapters (names or 'all-linear')."
    )


class ModelConfig(Strict):
    """Which checkpoint to load and how."""

    path: str = Field(description="Local directory with config.json, weights and tokenizer.")
    trust_remote_code: bool = Field(False, description="Run modelling code from the checkpoint.")
    attn_implementation: str = Field("sdpa", description="transformers attention backend.")
    gradient_checkpointing: bool = Field(
        False, description="Recompute layer activations in the backward pass to save memory."
    )
    lora: LoraSettings | None = Field(
        None, description="Train LoRA adapters instead of all weights."
    )
    vision_tower: Literal["train", "freeze"] = Field(
        "train",
        description="Vision-language models: the vision tower (and its merger into the "
        "language model) trains with the rest, or stays frozen (sharded either way).",
    )
    packing: Literal["auto", "packed", "padded"] = Field(
        "auto",
        description="Rows packed without padding, or padded; auto: packed with flash-attention "
        "(variable-length kernels), padded otherwise (packed attention would cost N x N).",
    )

    @property
    def packed(self) -> bool:
        if self.packing == "auto":
            return self.attn_implementation.startswith("flash_attention")
        return self.packing == "packed"


class OptimConfig(Strict):
    """AdamW with linear warmup, then a constant or cosine learning rate."""

    lr: float = Field(1e-6, gt=0, description="Peak learning rate.")
    weight_decay: float = Field(0.01, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    eps: float = Field(1e-8, gt=0, description="AdamW epsilon.")
    warmup_steps: int = Field(0, ge=0, description="Optimiser steps of linear warmup from 0.")
    schedule: Literal["constant", "cosine"] = Field("constant", description="After warmup.")
    total_steps: int | None = Field(
        None, gt=0, description="Optimiser steps in the run; needed by the cosine schedule."
    )
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine floor, as a share of lr.")
    grad_clip: float | None = Field(
        1.0, gt=0, description="Clip the global gradient norm to this (None: report only)."
    )
    implementation: Literal["auto", "fused", "foreach", "for-loop"] = Field(
        "auto",
        description="How AdamW runs: auto (torch's choice: foreach on CUDA, for-loop on the "
        "CPU), fused (one kernel over all parameters; CPU and CUDA), foreach (a few kernels "
        "per parameter group) or for-loop (one parameter at a time). The same update up to "
        "float32 rounding, which Adam's normalisation magnifies where a gradient is near zero.",
    )


class LossScaleSettings(Strict):
    """Dynamic loss scaling (``ascent.engine.loss_scale``); on whenever ``fsdp.param_dtype``
    is float16, off otherwise (bfloat16 and float32 have float32's range)."""

    init_scale: float = Field(
        2.0**16,
        ge=1,
        description="Starting scale S of the loss (a power of two, so that unscaling is exact); "
        "halved after each overflow, down to 1.",
    )
    growth_interval: int = Field(
        400, ge=1, description="Double S after this many optimiser steps in a row without overflow."
    )

    @field_validator("init_scale")
    @classmethod
    def _power_of_two(cls, value: float) -> float:
        if math.frexp(value)[0] != 0.5:
            raise ValueError(f"init_scale must be a power of two (e.g. 65536), not {value}")
        return value


class FSDPConfig(Strict):
    """How the model is sharded over the data-parallel ranks (FSDP2, one unit per layer)."""

    param_dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None,
        description="Compute dtype (parameters are kept in float32); None: bfloat16 on CUDA, "
        "float32 on CPU. float16 trains with dynamic loss scaling (loss_scale).",
    )
    reduce_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Dtype of the gradient reduce-scatter."
    )
    cpu_offload: bool = Field(
        False, description="Keep parameters, gradients and optimiser state on the CPU (CUDA only)."
    )
    reshard_after_forward: bool = Field(
        True, description="Free gathered layer weights after forward (re-gathered in backward)."
    )
    loss_scale: LossScaleSettings = Field(
        LossScaleSettings(), description="float16 only: dynamic loss scaling (LossScaleSettings)."
    )


class ParallelConfig(Strict):
    """How a role's ranks split the model and the work: the axes of one device mesh
    (``ascent.engine.mesh``). The data-parallel degree is derived: ranks / (tensor x
    sequence x context); FSDP shards parameters over every axis but ``tensor``. Checked
    against the ranks, heads and experts before any worker starts."""

    tensor: int = Field(
        1,
        ge=1,
        description="Tensor parallelism: each layer's weights split over this many ranks "
        "(DTensor, the model family's plan: attention heads and MLP columns, the "
        "vocabulary of the embedding and head; norms and the residual stream split by "
        "sequence). They form one data-parallel replica with the sequence and context "
        "ranks; must divide the ranks, the attention and key/value heads and the MLP width.",
    )
    sequence: int = Field(
        1,
        ge=1,
        description="Ulysses sequence parallelism: each packed micro-batch's tokens split "
        "over this many ranks (heads exchanged by all-to-all around attention); needs "
        "model.packing=packed; must divide the ranks and the attention heads (per tensor "
        "rank).",
    )
    context: int = Field(
        1,
        ge=1,
        description="Ring context parallelism: each packed micro-batch's tokens split over "
        "this many ranks in load-balanced chunks, attention computed round the ring (keys "
        "and values passed on, softmax accumulated online); not bounded by the heads, and "
        "combines with sequence (Ulysses inside each ring rank's share). Needs "
        "model.packing=packed.",
    )
    expert: int = Field(
        1,
        ge=1,
        description="Mixture of experts: each sparse layer's experts split over this many "
        "ranks (tokens reach them by all-to-all); must divide the ranks outside the tensor "
        "axis and the expert count. 1: every rank holds a shard of every expert.",
    )
    pipeline: int = Field(
        1,
        ge=1,
        description="Pipeline parallelism: the decoder layers cut into this many consecutive "
        "stages, one per rank, micro-batches run through them by a 1F1B schedule "
        "(torch.distributed.pipelining); the last stage scores log-probs or values. "
        "Combines with tensor (each stage split over the tensor ranks) and data "
        "parallelism; needs model.packing=packed, an untied head and no LoRA; at most the "
        "model's layers.",
    )

    @property
    def replica(self) -> int:
        """Ranks given the same rows: one replica's pipeline x tensor x sequence x context
        ranks."""
        return self.pipeline * self.tensor * self.sequence * self.context

    def rank_problem(self, world: int, field: str = "parallel") -> str | None:
        """Why these degrees cannot split ``world`` ranks, naming ``field``'s keys (the plan
        checks a role's section before any worker starts; the mesh checks again); None
        when they can."""
        tensor, sequence, expert, context = self.tensor, self.sequence, self.expert, self.context
        if self.pipeline > 1:
            return self._pipeline_problem(world, field)
        if world % tensor:
            return f"{field}.tensor={tensor} must divide the {world} training rank(s)"
        rest = world // tensor
        for name, size in (("sequence", sequence), ("expert", expert), ("context", context)):
            if rest % size:
                return (
                    f"{field}.{name}={size} must divide the {rest} rank(s) outside the tensor "
                    f"axis ({world} training ranks / tensor {tensor})"
                )
        if context > 1 and rest % (context * sequence):
            return (
                f"{field}: context x sequence = {context * sequence} must divide the {rest} "
                "rank(s) outside the tensor axis"
            )
        if context > 1 and expert > 1:
            return (
                f"{field}.context={context} does not split experts yet: set {field}.expert=1, "
                f"or split sequences with {field}.sequence instead of the ring"
            )
        if max(expert, sequence) % min(expert, sequence):
            return (
                f"{field}.sequence={sequence} and {field}.expert={expert}: one must divide the "
                "other (they share the mesh's inner axes)"
            )
        return None

    def _pipeline_problem(self, world: int, field: str) -> str | None:
        """Stages combine with tensor and data parallelism only (so far)."""
        for name in ("sequence", "context", "expert"):
            if getattr(self, name) > 1:
                return (
                    f"{field}.pipeline={self.pipeline} does not combine with {field}.{name} "
                    f"yet: set {field}.{name}=1 (pipeline stages combine with tensor and data "
                    "parallelism)"
                )
        if world % (self.pipeline * self.tensor):
            return (
                f"{field}: pipeline x tensor = {self.pipeline * self.tensor} must divide the "
                f"{world} training rank(s)"
            )
        return None


NO_SPLIT = ParallelConfig()  # every axis 1: data parallelism over all ranks
