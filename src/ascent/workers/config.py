"""Settings of the training-side roles: actor, reference, critic, implicit PRM."""

from typing import Any, Literal

from pydantic import Field, model_validator

from ascent.algos.rollout_correction import REJECT_MODES, Level, Mode
from ascent.algos.types import AggregationMode
from ascent.engine.config import FSDPConfig, ModelConfig, OptimConfig, ParallelConfig, Strict


def parallel_field() -> Any:
    """The ``parallel`` section of every role that trains or scores tokens."""
    return Field(
        ParallelConfig(),
        description="How the role's ranks split the model and its micro-batches: tensor, "
        "sequence (Ulysses), context (ring), expert and pipeline parallelism "
        "(ParallelConfig); data parallelism is the rest.",
    )


def pipeline_problem(role: str, model: ModelConfig, parallel: ParallelConfig) -> str | None:
    """Why ``role`` cannot run its model in pipeline stages, None when it can (or has none):
    stages take packed rows and whole weights (no LoRA adapters yet)."""
    if parallel.pipeline == 1:
        return None
    field = f"{role}.parallel.pipeline={parallel.pipeline}"
    if not model.packed:
        return f"{field} runs packed rows: set model.packing=packed"
    if model.lora is not None:
        return f"{field} does not take LoRA adapters yet: drop model.lora, or set it to 1"
    return None


def _refuse(problem: str | None) -> None:
    if problem is not None:
        raise ValueError(problem)


class PolicyLossSettings(Strict):
    """Which policy loss, by registered name or import path, and its keyword parameters."""

    name: str = Field("ppo", description="A name in POLICY_LOSSES or 'module:function'.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the loss (e.g. clip_high)."
    )


class RolloutCorrectionSettings(Strict):
    """Importance weights for the rollout engine's log-probs differing from the trainer's."""

    mode: Mode | None = Field(
        None,
        description="truncate (TIS), mask (MIS/IcePop; geometric-mean rejection at level "
        "geometric), reject_k1, reject_k3 or reject_max_abs (drop each sequence whose mean "
        "k1, mean k3 or largest absolute log-ratio exceeds reject_above; "
        "ascent.algos.rollout_correction), or none (metrics only); None: truncate when "
        "trainer.mode is one_step_off or async (stale rollouts), else none.",
    )
    level: Level = Field(
        "token",
        description="Ratio per token, per sequence (the product), or geometric (per "
        "sequence, the geometric mean of its token ratios).",
    )
    anchor: Literal["trainer", "rollout"] | None = Field(
        None,
        description="What the policy ratio is taken against: trainer (old log-probs "
        "recomputed or the update's own; rollout weights by mode) or rollout (the log-probs "
        "of the weights that sampled: the clip bounds the move from them, no truncation "
        "weights; mask and reject_* modes still drop samples). None: rollout when "
        "trainer.mode is one_step_off or async, else trainer.",
    )
    lower: float = Field(0.5, gt=0, description="Lower ratio bound for mode 'mask'.")
    upper: float = Field(2.0, gt=0, description="Upper bound: truncation or masking.")
    reject_above: float | None = Field(
        None,
        gt=0,
        description="Threshold of the reject_* modes (needed with them), in nats for k1 "
        "and k3, an absolute log-ratio for max_abs.",
    )

    @model_validator(mode="after")
    def _reject_needs_a_threshold(self) -> "RolloutCorrectionSettings":
        if self.mode in REJECT_MODES and self.reject_above is None:
            raise ValueError(
                f"rollout_correction.mode={self.mode} drops sequences above a threshold: "
                "set rollout_correction.reject_above (e.g. 0.01)"
            )
        return self


class MicroBatching(Strict):
    """How a rank's share of a batch is cut: mini-batches (optimiser steps) of micro-batches
    (forward/backward passes) under a token budget."""

    epochs: int = Field(1, ge=1, description="Passes over the batch per RL step.")
    mini_batches: int = Field(
        1,
        ge=1,
        description="Optimiser steps per epoch; the trainer derives it as "
        "prompts_per_step / prompts_per_update.",
    )
    tokens_per_micro_batch: int = Field(
        8192, ge=1, description="Token budget of one forward/backward (prompt + response)."
    )


class DistillLossSettings(Strict):
    """The distillation loss terms of the actor (``ascent.algos.distill``), from the batch's
    teacher fields; the advantage term is applied by the driver, not here."""

    reverse_kl_coef: float = Field(
        0.0, ge=0, description="Weight of the per-token reverse KL loss (teacher_log_probs)."
    )
    reverse_kl_estimator: str = Field(
        "k2", description="Its estimator: k2 (the reverse KL's gradient), or k1, k3, ..."
    )
    forward_kl_top_k_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of the forward KL over the teacher's top-k tokens "
        "(teacher_top_ids, teacher_top_log_probs).",
    )


class ActorConfig(MicroBatching):
    """The policy being trained."""

    model: ModelConfig = Field(description="The policy checkpoint (ModelConfig).")
    optim: OptimConfig = Field(OptimConfig(), description="Optimiser (OptimConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    loss: PolicyLossSettings = Field(
        PolicyLossSettings(), description="Policy loss and its parameters (PolicyLossSettings)."
    )
    aggregation: AggregationMode = Field("token-mean", description="Loss aggregation mode.")
    entropy_coef: float = Field(0.0, ge=0, description="Weight of the entropy bonus.")
    kl_coef: float = Field(
        0.0, ge=0, description="Weight of the KL-to-reference loss (needs ref_log_probs)."
    )
    kl_estimator: str = Field("k3", description="k1, abs, k2, k3, k1+ or k3+ (verl names too).")
    router_aux_loss_coef: float = Field(
        0.0,
        ge=0,
        description="Weight of a mixture-of-experts model's load-balancing loss "
        "(ascent.moe.routing); at 0 it and the expert load are only measured.",
    )
    router_replay: Literal["off", "rollout"] = Field(
        "off",
        description="Mixture of experts: route each token to the experts the rollout engine "
        "chose (batch field routed_experts, native engine) in every forward of the actor, "
        "instead of its own router's choice (ascent.moe.replay).",
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollout.")
    max_response_length: int | None = Field(
        None, gt=0, description="K of seq-mean-token-sum-norm; default: the batch's R."
    )
    rollout_correction: RolloutCorrectionSettings = Field(
        RolloutCorrectionSettings(),
        description="Weights for rollout/trainer log-prob mismatch (RolloutCorrectionSettings).",
    )
    chunk_tokens: int = Field(1024, ge=1, description="Tokens per log-prob chunk.")
    parallel: ParallelConfig = parallel_field()
    distill: DistillLossSettings | None = Field(
        None, description="Distillation loss terms (DistillLossSettings); None: none."
    )

    @model_validator(mode="after")
    def _stages_can_train(self) -> "ActorConfig":
        _refuse(pipeline_problem("actor", self.model, self.parallel))
        if self.parallel.pipeline == 1:
            return self
        top_k = self.distill is not None and self.distill.forward_kl_top_k_coef > 0
        for needed, what in (
            (top_k, "distill.forward_kl_top_k_coef (top-k targets)"),
            (self.router_replay != "off", "router_replay"),
            (self.router_aux_loss_coef > 0, "router_aux_loss_coef"),
        ):
            if needed:
                raise ValueError(
                    f"actor.parallel.pipeline={self.parallel.pipeline} does not take {what} "
                    "yet: turn it off, or set parallel.pipeline=1"
                )
        return self


class ReferenceConfig(Strict):
    """The frozen reference policy (for the KL term)."""

    model: ModelConfig = Field(description="The reference checkpoint (ModelConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    tokens_per_micro_batch: int = Field(8192, ge=1, description="Token budget per forward.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollout.")
    chunk_tokens: int = Field(1024, ge=1, description="Tokens per log-prob chunk.")
    parallel: ParallelConfig = parallel_field()

    @model_validator(mode="after")
    def _stages_can_score(self) -> "ReferenceConfig":
        _refuse(pipeline_problem("reference", self.model, self.parallel))
        return self


class TeacherConfig(Strict):
    """A frozen teacher (on-policy distillation): its log-probs of the student's tokens and
    its top-k next tokens at every response position. Its forward is not split over ranks
    (no sequence parallelism): each rank scores its own rows."""

    model: ModelConfig = Field(description="The teacher checkpoint (ModelConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    tokens_per_micro_batch: int = Field(8192, ge=1, description="Token budget per forward.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollout.")
    chunk_tokens: int = Field(1024, ge=1, description="Tokens per log-prob chunk.")
    top_k: int = Field(1, ge=1, description="Teacher's most likely tokens kept per position.")
    vocab_limit: int | None = Field(
        None, ge=1, description="Only ids below it are top-k candidates (the student's vocab)."
    )


class CriticConfig(MicroBatching):
    """The value model (PPO with GAE)."""

    model: ModelConfig = Field(description="Backbone checkpoint; a value head is added.")
    optim: OptimConfig = Field(OptimConfig(lr=1e-5), description="Optimiser (OptimConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    value_clip: float | None = Field(0.5, gt=0, description="Clip range around old values.")
    aggregation: AggregationMode = Field("token-mean", description="Loss aggregation mode.")
    parallel: ParallelConfig = parallel_field()

    @model_validator(mode="after")
    def _stages_can_train(self) -> "CriticConfig":
        _refuse(pipeline_problem("critic", self.model, self.parallel))
        return self


class ImplicitPRMConfig(MicroBatching):
    """PRIME's implicit process reward model (a causal LM trained on outcome labels)."""

    model: ModelConfig = Field(description="Its checkpoint; the policy's at the start.")
    optim: OptimConfig = Field(OptimConfig(lr=1e-6), description="Optimiser (OptimConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    beta: float = Field(0.05, gt=0, description="beta of r = beta * (lp_prm - lp_ref).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollout.")
    chunk_tokens: int = Field(1024, ge=1, description="Tokens per log-prob chunk.")
