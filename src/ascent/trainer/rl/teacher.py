"""On-policy distillation in an RL run: the ``teacher`` section, its checks before any worker
starts, the teacher's worker config, and the advantage term.

The teacher scores the student's own sampled tokens (``ascent.workers.teacher`` for a local
checkpoint, ``ascent.teacher.endpoint`` for an OpenAI-compatible server); the terms are
``ascent.algos.distill``'s: the per-token reverse KL in the advantage (on by default), as a
loss term, and the forward KL over the teacher's top-k, each with its coefficient, added to
the task's advantages weighted by ``task_advantage`` (0: pure distillation).
"""

from pydantic import Field, model_validator
from torch import Tensor

from ascent.algos.distill import distillation_metrics, reverse_kl_advantages
from ascent.algos.kl import kl_estimator_name
from ascent.batch import Batch
from ascent.engine.config import FSDPConfig, ModelConfig, Strict
from ascent.teacher.endpoint import TeacherEndpointConfig
from ascent.workers.config import DistillLossSettings
from ascent.workers.resources import ResourcesConfig


class TeacherSettings(Strict):
    """On-policy distillation: a frozen teacher scores every token the student samples, and
    the student is trained toward it (``ascent.algos.distill``), with or without the task's
    reward. Give ``model`` (a local checkpoint) or ``endpoint`` (a server that returns prompt
    log-probs: ``ascent serve`` or vLLM); the teacher must share the student's vocabulary."""

    model: ModelConfig | None = Field(
        None,
        description="A local teacher checkpoint (ModelConfig): a frozen role like the "
        "reference, any family the trainer loads.",
    )
    endpoint: TeacherEndpointConfig | None = Field(
        None,
        description="A teacher behind an OpenAI-compatible completions endpoint "
        "(TeacherEndpointConfig); needs rollout.temperature 1 (servers score at 1).",
    )
    resources: ResourcesConfig | None = Field(
        None, description="Own devices for a local teacher; None: colocated with the actor."
    )
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding of a local teacher.")
    tokens_per_micro_batch: int = Field(8192, ge=1, description="Token budget per forward.")
    top_k: int = Field(
        1,
        ge=1,
        le=64,
        description="The teacher's most likely tokens kept per position (top-1 gives "
        "distill/agreement; forward_kl_top_k uses all k).",
    )
    reverse_kl_advantage: float = Field(
        1.0,
        ge=0,
        description="coef of -(lp_student - lp_teacher) added to each sampled token's "
        "advantage (ascent.algos.distill.reverse_kl_advantage).",
    )
    reverse_kl_loss: float = Field(
        0.0, ge=0, description="Weight of the per-token reverse KL as a loss term."
    )
    reverse_kl_estimator: str = Field(
        "k2", description="Estimator of that loss term (k2: the reverse KL's own gradient)."
    )
    forward_kl_top_k: float = Field(
        0.0, ge=0, description="Weight of the forward KL over the teacher's top-k tokens."
    )
    task_advantage: float = Field(
        1.0,
        ge=0,
        description="Weight of the algorithm's task advantages in the sum (0: pure "
        "distillation; the reward is still computed and logged).",
    )

    @model_validator(mode="after")
    def _one_teacher_and_a_term(self) -> "TeacherSettings":
        if (self.model is None) == (self.endpoint is None):
            raise ValueError("teacher needs exactly one of teacher.model or teacher.endpoint")
        if self.resources is not None and self.model is None:
            raise ValueError("teacher.resources places a local teacher: give teacher.model")
        if not (self.reverse_kl_advantage or self.reverse_kl_loss or self.forward_kl_top_k):
            raise ValueError(
                "teacher: every distillation coefficient is 0 (reverse_kl_advantage, "
                "reverse_kl_loss, forward_kl_top_k): set one, or remove the teacher section"
            )
        kl_estimator_name(self.reverse_kl_estimator)
        return self

    @property
    def name(self) -> str:
        return self.model.path if self.model is not None else self.endpoint.base_url

    def loss_settings(self) -> DistillLossSettings | None:
        """The actor's loss terms, or None when the teacher only shapes the advantages."""
        if not (self.reverse_kl_loss or self.forward_kl_top_k):
            return None
        return DistillLossSettings(
            reverse_kl_coef=self.reverse_kl_loss,
            reverse_kl_estimator=self.reverse_kl_estimator,
            forward_kl_top_k_coef=self.forward_kl_top_k,
        )

    def describe(self) -> str:
        terms = [
            f"{label} x{coef:g}"
            for label, coef in (
                ("reverse KL in the advantage", self.reverse_kl_advantage),
                (f"reverse KL loss ({self.reverse_kl_estimator})", self.reverse_kl_loss),
                (f"top-{self.top_k} forward KL loss", self.forward_kl_top_k),
            )
            if coef
        ]
        task = "pure distillation" if not self.task_advantage else f"task x{self.task_advantage:g}"
        return f"  teacher {self.name}: {', '.join(terms)}; {task}"


def distilled_advantages(
    batch: Batch, advantages: Tensor, settings: TeacherSettings
) -> tuple[Tensor, dict[str, float]]:
    """A = task_advantage * A_task + reverse-KL advantage (when on), and the distill/*
    metrics, from the batch's teacher fields and the student's log-probs of its samples
    (old log-probs, else the rollout's)."""
    mask = batch["response_mask"]
    student = batch["old_log_probs"] if "old_log_probs" in batch else batch["rollout_log_probs"]
    teacher = batch["teacher_log_probs"]
    combined = advantages * settings.task_advantage
    if settings.reverse_kl_advantage:
        combined = combined + reverse_kl_advantages(
            student, teacher, mask, settings.reverse_kl_advantage
        )
    metrics = distillation_metrics(
        student, teacher, batch["responses"], batch["teacher_top_ids"], mask
    )
    return combined, metrics
