"""PRIME's implicit process reward model as a worker: a trainable causal LM (a copy of the
policy at the start) whose log-probs against the reference's are the process rewards
(``ascent.algos.implicit_prm``), trained online on the step's outcome labels."""

import torch

from ascent.algos import LossNormalizer
from ascent.algos.implicit_prm import implicit_prm_loss
from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.workers.common import (
    EngineCheckpoints,
    policy_forward,
    require,
    response_length,
    response_log_probs,
    train,
    trainable_policy_engine,
)
from ascent.workers.config import ImplicitPRMConfig

TOKENS = ("input_ids", "attention_mask", "responses")


class ImplicitPRMWorker(EngineCheckpoints, Worker):
    """``log_probs`` -> ``prm_log_probs`` (B, R); ``update`` trains on ``prm_labels``."""

    def __init__(self, config: ImplicitPRMConfig | dict) -> None:
        self.config = ImplicitPRMConfig.model_validate(config)
        self.packed = self.config.model.packed
        self.engine = trainable_policy_engine(self.config, self.device)

    @register(Dispatch.DP)
    def log_probs(self, batch: Batch) -> Batch:
        """``prm_log_probs`` (B, R): log pi_phi of the response tokens."""
        require(batch, "implicit_prm", *TOKENS)
        log_probs, _ = response_log_probs(self.engine, batch, self.device, self.config, self.packed)
        return Batch.from_dict({"prm_log_probs": log_probs})

    @register(Dispatch.DP)
    def update(self, batch: Batch) -> dict[str, float]:
        """The cross-entropy of sigmoid(beta * sum_t (lp_phi - lp_ref)) against the outcome
        labels ``prm_labels`` (B,) in [0, 1]; needs ``response_mask`` and ``ref_log_probs``
        (B, R). Returns ``prm/{loss,accuracy,reward,grad_norm,...}``."""
        require(batch, "implicit_prm.update", *TOKENS, "response_mask", "ref_log_probs")
        require(batch, "implicit_prm.update", "prm_labels")
        return train(
            self.engine,
            batch,
            self.config,
            self._micro_loss,
            role="prm",
            norm_length=response_length(batch),
            dp_size=self.ctx.dp_size,
            padded=not self.packed,
        )

    def _micro_loss(self, micro: Batch, normalizer: LossNormalizer) -> tuple[torch.Tensor, dict]:
        device = self.device
        log_probs, _ = policy_forward(
            self.engine, micro, device, self.config.temperature, self.packed
        )
        out = implicit_prm_loss(
            log_probs,
            micro["ref_log_probs"].to(device),
            micro["response_mask"].to(device),
            micro["prm_labels"].to(device),
            beta=self.config.beta,
            num_sequences=normalizer.num_sequences,
            dp_size=normalizer.dp_size,
        )
        return out.loss, {"loss": out.loss.detach(), **out.metrics}
