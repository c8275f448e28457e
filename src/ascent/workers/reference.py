"""The reference policy: frozen, sharded, log-probs only."""

from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine import PolicyModule, TrainEngine
from ascent.models.loading import load_causal_lm
from ascent.workers.common import micro_batched, policy_forward, require
from ascent.workers.config import ReferenceConfig


class ReferenceWorker(Worker):
    """``log_probs`` -> ``ref_log_probs`` (B, R). With a LoRA actor, use the actor's own
    ``ref_log_probs`` instead and skip this role."""

    def __init__(self, config: ReferenceConfig | dict) -> None:
        self.config = ReferenceConfig.model_validate(config)
        self.packed = self.config.model.packed
        model = load_causal_lm(
            self.config.model.path,
            trust_remote_code=self.config.model.trust_remote_code,
            attn_implementation=self.config.model.attn_implementation,
        )
        model.requires_grad_(False)
        self.engine = TrainEngine(
            PolicyModule(model, chunk_tokens=self.config.chunk_tokens),
            device=self.device,
            fsdp=self.config.fsdp,
            optim=None,
        )
        self.engine.train(False)

    @register(Dispatch.DP)
    def log_probs(self, batch: Batch) -> Batch:
        require(batch, "reference", "input_ids", "attention_mask", "responses")
        (log_probs, _) = micro_batched(
            lambda micro: policy_forward(
                self.engine.module, micro, self.device, self.config.temperature, self.packed
            ),
            batch,
            self.config.tokens_per_micro_batch,
            self.device,
            not self.packed,
        )
        return Batch.from_dict({"ref_log_probs": log_probs})
