"""The critic: a value head on a transformers backbone, trained with the clipped value loss."""

import torch

from ascent.algos import LossNormalizer, aggregate, value_loss
from ascent.batch import Batch
from ascent.controller import Dispatch, Worker, register
from ascent.engine import ValueModule
from ascent.engine.pipeline import PipelineEngine, make_engine
from ascent.models.loading import load_value_model
from ascent.models.lora import apply_lora
from ascent.workers.common import (
    EngineCheckpoints,
    check_replicas,
    extra_inputs_for,
    gather_full_weights,
    micro_batched,
    require,
    response_length,
    split_plan,
    train,
    value_forward,
)
from ascent.workers.config import CriticConfig
from ascent.workers.pipeline_passes import pipeline_outputs

TOKENS = ("input_ids", "attention_mask", "responses")


class CriticWorker(EngineCheckpoints, Worker):
    """``values`` -> ``values`` (B, R); ``update`` regresses them on ``returns``."""

    def __init__(self, config: CriticConfig | dict) -> None:
        self.config = CriticConfig.model_validate(config)
        check_replicas(self.ctx, self.config.parallel)
        model_cfg = self.config.model
        self.packed = model_cfg.packed
        model = load_value_model(
            model_cfg.path,
            trust_remote_code=model_cfg.trust_remote_code,
            attn_implementation=model_cfg.attn_implementation,
        )
        extra = extra_inputs_for(model, model_cfg)
        if model_cfg.lora is not None:  # the fresh value head trains whole, beside the adapters
            model = apply_lora(model, model_cfg.lora, train_heads=True)
        module = ValueModule(model, extra_inputs=extra)
        self.engine = make_engine(
            module,
            device=self.device,
            fsdp=self.config.fsdp,
            optim=self.config.optim,
            gradient_checkpointing=model_cfg.gradient_checkpointing,
            parallel=self.config.parallel,
            tensor_plan=split_plan(module, self.config.parallel),
        )

    @register(Dispatch.DP)
    def values(self, batch: Batch) -> Batch:
        require(batch, "critic", *TOKENS)
        if isinstance(self.engine, PipelineEngine):
            budget = self.config.tokens_per_micro_batch
            (values,) = pipeline_outputs(self.engine, batch, budget)
            return Batch.from_dict({"values": values})
        self.engine.train(False)
        (values,) = micro_batched(
            lambda micro: (value_forward(self.engine, micro, self.device, self.packed),),
            batch,
            self.config.tokens_per_micro_batch,
            self.device,
            not self.packed,
        )
        return Batch.from_dict({"values": values})

    @register(Dispatch.DP)
    def update(self, batch: Batch) -> dict[str, float]:
        """Clipped value loss 0.5 * agg(max((V - R)^2, (V_clip - R)^2)) on ``returns``, with
        ``values`` (the values at collection time) as the clipping centre. Needs
        ``response_mask``, ``values`` and ``returns`` (B, R)."""
        cfg = self.config
        require(batch, "critic.update", *TOKENS, "response_mask", "values", "returns")
        return train(
            self.engine,
            batch,
            cfg,
            self._micro_loss,
            role="critic",
            norm_length=response_length(batch),
            dp_size=self.ctx.dp_size,
            padded=not self.packed,
            scored_loss=self._objective,
        )

    def _micro_loss(self, micro: Batch, normalizer: LossNormalizer) -> tuple[torch.Tensor, dict]:
        values = value_forward(self.engine, micro, self.device, self.packed)
        return self._objective(micro, (values,), normalizer)

    def _objective(
        self, micro: Batch, scored: tuple[torch.Tensor], normalizer: LossNormalizer
    ) -> tuple[torch.Tensor, dict]:
        """The micro-batch's share of the value loss from its values ``scored`` (B, R)."""
        mask = micro["response_mask"].to(self.device)
        terms = value_loss(
            scored[0],
            micro["values"].to(self.device),
            micro["returns"].to(self.device),
            mask,
            clip=self.config.value_clip,
        )
        loss = aggregate(terms.per_token, mask, self.config.aggregation, normalizer)
        return loss, {"vf_loss": loss.detach(), **terms.metrics}

    @register(Dispatch.ALL)
    def full_weights(self) -> dict[str, torch.Tensor] | None:
        """Every weight unsharded on rank 0 (None elsewhere); all ranks take part."""
        return gather_full_weights(self.engine, self.ctx.rank)
