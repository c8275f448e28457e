"""The reference policy: frozen, sharded, log-probs only."""

from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine.pipeline import make_engine
from ascent.workers.common import (
    check_replicas,
    policy_module,
    require,
    response_log_probs,
    split_plan,
)
from ascent.workers.config import ReferenceConfig


class ReferenceWorker(Worker):
    """``log_probs`` -> ``ref_log_probs`` (B, R). With a LoRA actor, use the actor's own
    ``ref_log_probs`` instead and skip this role."""

    def __init__(self, config: ReferenceConfig | dict) -> None:
        self.config = ReferenceConfig.model_validate(config)
        check_replicas(self.ctx, self.config.parallel)
        self.packed = self.config.model.packed
        module = policy_module(self.config.model, self.config.chunk_tokens)
        module.requires_grad_(False)
        self.engine = make_engine(
            module,
            device=self.device,
            fsdp=self.config.fsdp,
            optim=None,
            parallel=self.config.parallel,
            tensor_plan=split_plan(module, self.config.parallel),
        )
        self.engine.train(False)

    @register(Dispatch.DP)
    def log_probs(self, batch: Batch) -> Batch:
        require(batch, "reference", "input_ids", "attention_mask", "responses")
        log_probs, _ = response_log_probs(self.engine, batch, self.device, self.config, self.packed)
        return Batch.from_dict({"ref_log_probs": log_probs})
