"""A role's passes over a batch on a pipeline engine (``ascent.engine.pipeline``): the
micro-batches of a batch (inference) or of a mini-batch (training) go through the stages
in one schedule run, instead of one forward (and backward) each.

The micro-batches, the loss denominators and the metrics are those of the unsplit passes
(``ascent.workers.common``): the same token-budget plan, the same global counts, each
micro-batch's loss computed once, by the same function of its log-probs (or values), on
the last stage.
"""

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ascent.algos import LossNormalizer
from ascent.batch import Batch
from ascent.engine.packing import PackedSequences, pack_for_responses
from ascent.engine.pipeline import PipelineEngine, StageLoss
from ascent.engine.token_budget import synchronized_micro_batches
from ascent.workers.config import MicroBatching
from ascent.workers.metrics import MetricAccumulator
from ascent.workers.mini_batches import normalized_mini_batches

# (micro-batch, its outputs (B, R) each: log-probs and entropy, or values, normaliser)
# -> (loss, metrics)
ScoredLoss = Callable[[Batch, tuple[Tensor, ...], LossNormalizer], tuple[Tensor, dict]]


def _layouts(engine: PipelineEngine, micros: list[Batch]) -> list[PackedSequences]:
    device = engine.device
    return [
        pack_for_responses(
            micro["input_ids"].to(device),
            micro["attention_mask"].to(device),
            micro["responses"].shape[1],
        )
        for micro in micros
    ]


def _unpacked(layout: PackedSequences, outputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Per-position outputs (T,) of a laid-out micro-batch -> (B, R) each."""
    return tuple(layout.unpack(output.index_select(0, layout.query_index)) for output in outputs)


def _micro_batches(engine: PipelineEngine, batch: Batch, budget: int) -> list[list[int]]:
    """The token-budget plan of ``batch`` (the same count on every rank)."""
    tokens = batch["attention_mask"].sum(dim=-1).tolist()
    return synchronized_micro_batches(tokens, budget, engine.device)


def _stage_loss(
    scored_loss: ScoredLoss,
    micros: list[Batch],
    layouts: list[PackedSequences],
    normalizer: LossNormalizer,
) -> StageLoss:
    """Micro-batch i's loss from the last stage's per-position outputs."""

    def loss(index: int, outputs: tuple[Tensor, ...]) -> tuple[Tensor, dict]:
        return scored_loss(micros[index], _unpacked(layouts[index], outputs), normalizer)

    return loss


@torch.no_grad()
def pipeline_outputs(
    engine: PipelineEngine, batch: Batch, budget: int, temperature: float = 1.0
) -> list[Tensor]:
    """The last stage's outputs (B, R) for ``batch`` (log-probs and entropy, or values), in
    eval mode, over micro-batches of ``budget`` tokens, on the CPU, on every rank."""
    engine.train(False)
    plan = _micro_batches(engine, batch, budget)
    micros = [batch.index(rows) for rows in plan]
    layouts = _layouts(engine, micros)
    results = engine.run(layouts, temperature=temperature)
    outputs: list[Tensor] | None = None
    for rows, layout, result in zip(plan, layouts, results, strict=True):
        unpacked = _unpacked(layout, result)
        if outputs is None:
            outputs = [torch.zeros(len(batch), *u.shape[1:], dtype=u.dtype) for u in unpacked]
        for out, part in zip(outputs, unpacked, strict=True):
            out[rows] = part.cpu()
    return outputs or []


def pipeline_train(
    engine: PipelineEngine,
    batch: Batch,
    settings: MicroBatching,
    scored_loss: ScoredLoss,
    temperature: float = 1.0,
    **loops: Any,
) -> dict[str, float]:
    """``ascent.workers.common.train`` on a pipeline engine (``loops``: its role,
    norm_length, dp_size and mask_key): each mini-batch's micro-batches in one schedule
    run, ``scored_loss`` of each on the last stage."""
    engine.train(True)
    metrics = MetricAccumulator(loops["role"])
    for mini, normalizer in normalized_mini_batches(engine, batch, settings, **loops):
        plan = _micro_batches(engine, mini, settings.tokens_per_micro_batch)
        micros = [mini.index(rows) for rows in plan]
        layouts = _layouts(engine, micros)
        loss = _stage_loss(scored_loss, micros, layouts, normalizer)
        for micro_metrics in engine.run(layouts, loss, temperature):
            metrics.add_micro(micro_metrics)
        metrics.end_mini_batch(**engine.step().metrics())
    return metrics.result(engine.device)
