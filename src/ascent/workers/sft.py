"""The SFT role: next-token cross-entropy on the masked tokens, on the FSDP2 engine."""

import torch
from pydantic import Field

from ascent.algos import LossNormalizer
from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine import FSDPConfig, ModelConfig, OptimConfig, TrainEngine
from ascent.engine.config import Strict
from ascent.engine.packing import pack_for_targets
from ascent.engine.token_budget import synchronized_micro_batches
from ascent.workers.common import (
    EngineCheckpoints,
    model_inputs,
    policy_module,
    require,
    token_counts,
    train,
)
from ascent.workers.config import MicroBatching

FIELDS = ("input_ids", "attention_mask", "loss_mask")


class SFTWorkerConfig(Strict):
    model: ModelConfig
    optim: OptimConfig = OptimConfig(lr=1e-4)
    fsdp: FSDPConfig = FSDPConfig()
    tokens_per_micro_batch: int = Field(8192, ge=1)
    chunk_tokens: int = Field(1024, ge=1)


class SFTWorker(EngineCheckpoints, Worker):
    """``train_step`` (one optimiser step over a batch), ``eval_sums``, checkpoints, export.

    Batch: ``input_ids``, ``attention_mask`` and ``loss_mask`` (B, L); the loss is the mean
    negative log-likelihood of the tokens where ``loss_mask`` is 1, over the whole batch on
    all ranks (so it does not depend on micro-batching or the number of ranks).
    """

    def __init__(self, config: SFTWorkerConfig | dict) -> None:
        self.config = SFTWorkerConfig.model_validate(config)
        cfg = self.config
        self.packed = cfg.model.packed
        self.engine = TrainEngine(
            policy_module(cfg.model, cfg.chunk_tokens),
            device=self.device,
            fsdp=cfg.fsdp,
            optim=cfg.optim,
            gradient_checkpointing=cfg.model.gradient_checkpointing,
        )

    def _negative_log_likelihood(self, micro: Batch) -> torch.Tensor:
        """Sum of -log p over the micro-batch's loss tokens."""
        inputs = pack_for_targets(
            micro["input_ids"].to(self.device),
            micro["attention_mask"].to(self.device),
            micro["loss_mask"].to(self.device),
            packed=self.packed,
        )
        module = self.engine.module
        log_probs, _ = module(
            inputs.input_ids,
            query_index=inputs.query_index,
            targets=inputs.targets,
            attention_mask=inputs.attention_mask,
            compute_entropy=False,
            **model_inputs(module, micro, inputs, self.device),
        )
        return -log_probs.sum()

    @register(Dispatch.DP)
    def train_step(self, batch: Batch) -> dict[str, float]:
        require(batch, "sft", *FIELDS)
        settings = MicroBatching(tokens_per_micro_batch=self.config.tokens_per_micro_batch)

        def micro_loss(micro: Batch, normalizer: LossNormalizer) -> tuple[torch.Tensor, dict]:
            share = normalizer.dp_size / max(normalizer.num_tokens, 1.0)
            loss = self._negative_log_likelihood(micro) * share
            return loss, {"loss": loss.detach()}

        return train(
            self.engine,
            batch,
            settings,
            micro_loss,
            role="sft",
            norm_length=batch["input_ids"].shape[1],
            dp_size=self.ctx.dp_size,
            mask_key="loss_mask",
            padded=not self.packed,
        )

    @register(Dispatch.DP)
    def eval_sums(self, batch: Batch) -> dict[str, float]:
        """Summed NLL of the loss tokens (``nll``) and their count (``tokens``), over the
        whole batch on all ranks."""
        require(batch, "sft", *FIELDS)
        self.engine.train(False)
        total = torch.zeros(2, dtype=torch.float64, device=self.device)
        with torch.no_grad():
            budget = self.config.tokens_per_micro_batch
            plan = synchronized_micro_batches(
                token_counts(batch), budget, self.device, not self.packed
            )
            for rows in plan:
                micro = batch.index(rows)
                total[0] += self._negative_log_likelihood(micro).double()
                total[1] += micro["loss_mask"].sum()
        nll, tokens = self.engine.all_reduce_sum(total.tolist())
        return {"nll": nll, "tokens": tokens}
