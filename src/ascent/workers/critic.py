"""The critic: a value head on a transformers backbone, trained with the clipped value loss."""

import torch

from ascent.algos import LossNormalizer, aggregate, value_loss
from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine import TrainEngine, ValueModule, synchronized_micro_batches
from ascent.models.loading import load_value_model
from ascent.workers.common import (
    gather_full_weights,
    micro_batched,
    require,
    response_length,
    token_counts,
    value_forward,
)
from ascent.workers.config import CriticConfig
from ascent.workers.metrics import MetricAccumulator

TOKENS = ("input_ids", "attention_mask", "responses")


class CriticWorker(Worker):
    """``values`` -> ``values`` (B, R); ``update`` regresses them on ``returns``."""

    def __init__(self, config: CriticConfig | dict) -> None:
        self.config = CriticConfig.model_validate(config)
        model_cfg = self.config.model
        model = load_value_model(
            model_cfg.path,
            trust_remote_code=model_cfg.trust_remote_code,
            attn_implementation=model_cfg.attn_implementation,
        )
        self.engine = TrainEngine(
            ValueModule(model),
            device=self.device,
            fsdp=self.config.fsdp,
            optim=self.config.optim,
            gradient_checkpointing=model_cfg.gradient_checkpointing,
        )

    @register(Dispatch.DP)
    def values(self, batch: Batch) -> Batch:
        require(batch, "critic", *TOKENS)
        self.engine.train(False)
        (values,) = micro_batched(
            lambda micro: (value_forward(self.engine.module, micro, self.device),),
            batch,
            self.config.tokens_per_micro_batch,
            self.device,
        )
        return Batch.from_dict({"values": values})

    @register(Dispatch.DP)
    def update(self, batch: Batch) -> dict[str, float]:
        """Clipped value loss 0.5 * agg(max((V - R)^2, (V_clip - R)^2)) on ``returns``, with
        ``values`` (the values at collection time) as the clipping centre. Needs
        ``response_mask``, ``values`` and ``returns`` (B, R)."""
        cfg = self.config
        require(batch, "critic.update", *TOKENS, "response_mask", "values", "returns")
        if len(batch) % cfg.mini_batches:
            raise ValueError(
                f"critic.update: {len(batch)} rows on this rank do not split into "
                f"mini_batches={cfg.mini_batches}"
            )
        self.engine.train(True)
        metrics = MetricAccumulator("critic")
        for _ in range(cfg.epochs):
            for mini in batch.split(cfg.mini_batches):
                mask = mini["response_mask"].bool()
                tokens, sequences = self.engine.all_reduce_sum(
                    [float(mask.sum()), float(mask.any(dim=-1).sum())]
                )
                normalizer = LossNormalizer(
                    tokens, sequences, response_length(mini), dp_size=self.ctx.world_size
                )
                plan = synchronized_micro_batches(
                    token_counts(mini), cfg.tokens_per_micro_batch, self.device
                )
                for rows in plan:
                    micro = mini.index(rows)
                    predicted = value_forward(self.engine.module, micro, self.device)
                    terms = value_loss(
                        predicted,
                        micro["values"].to(self.device),
                        micro["returns"].to(self.device),
                        micro["response_mask"].to(self.device),
                        clip=cfg.value_clip,
                    )
                    loss = aggregate(
                        terms.per_token,
                        micro["response_mask"].to(self.device),
                        cfg.aggregation,
                        normalizer,
                    )
                    loss.backward()
                    metrics.add_micro({"vf_loss": loss.detach(), **terms.metrics})
                step = self.engine.step()
                metrics.end_mini_batch(
                    grad_norm=step.grad_norm, lr=step.lr, skipped_steps=float(step.skipped)
                )
        return metrics.result(self.device)

    @register(Dispatch.ALL)
    def full_weights(self) -> dict[str, torch.Tensor] | None:
        """Every weight unsharded on rank 0 (None elsewhere); all ranks take part."""
        return gather_full_weights(self.engine, self.ctx.rank)
