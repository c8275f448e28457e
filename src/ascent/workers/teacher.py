"""The teacher of on-policy distillation: a frozen checkpoint, sharded like the reference,
that scores the student's sampled tokens."""

from torch import Tensor

from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine import TrainEngine
from ascent.engine.modules import TeacherModule
from ascent.workers.common import (
    extra_inputs_for,
    load_policy_model,
    micro_batched,
    policy_forward,
    require,
)
from ascent.workers.config import TeacherConfig


class TeacherWorker(Worker):
    """``log_probs`` -> ``teacher_log_probs`` (B, R), ``teacher_top_ids`` (B, R, k) and
    ``teacher_top_log_probs`` (B, R, k): the teacher's log-prob of each response token given
    the same prefix, and its k most likely next tokens there (most likely first), at the
    rollout's temperature. Zero where there is no response token."""

    def __init__(self, config: TeacherConfig | dict) -> None:
        self.config = cfg = TeacherConfig.model_validate(config)
        self.packed = cfg.model.packed
        model = load_policy_model(cfg.model)
        module = TeacherModule(
            model,
            top_k=cfg.top_k,
            vocab_limit=cfg.vocab_limit,
            chunk_tokens=cfg.chunk_tokens,
            extra_inputs=extra_inputs_for(model, cfg.model),
        )
        module.requires_grad_(False)
        self.engine = TrainEngine(module, device=self.device, fsdp=cfg.fsdp, optim=None)
        self.engine.train(False)

    @register(Dispatch.DP)
    def log_probs(self, batch: Batch) -> Batch:
        require(batch, "teacher", "input_ids", "attention_mask", "responses")
        log_probs, top_ids, top_log_probs = micro_batched(
            self._forward,
            batch,
            self.config.tokens_per_micro_batch,
            self.device,
            not self.packed,
        )
        return Batch.from_dict(
            {
                "teacher_log_probs": log_probs,
                "teacher_top_ids": top_ids,
                "teacher_top_log_probs": top_log_probs,
            }
        )

    def _forward(self, micro: Batch) -> tuple[Tensor, Tensor, Tensor]:
        log_probs, top_ids, top_log_probs = policy_forward(
            self.engine, micro, self.device, self.config.temperature, self.packed
        )
        return log_probs.float(), top_ids, top_log_probs.float()
