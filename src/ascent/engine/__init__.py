"""The training engine: transformers models under FSDP2, packing, token-budget micro-batches."""

from ascent.engine.config import FSDPConfig, LoraSettings, ModelConfig, OptimConfig
from ascent.engine.fsdp import StepResult, TrainEngine
from ascent.engine.modules import PolicyModule, SequenceScoreModule, ValueModule
from ascent.engine.packing import PackedSequences, pack_for_responses, pack_for_targets
from ascent.engine.token_budget import (
    balance_rows,
    data_parallel_order,
    plan_micro_batches,
    synchronized_micro_batches,
)

__all__ = [
    "FSDPConfig",
    "LoraSettings",
    "ModelConfig",
    "OptimConfig",
    "PackedSequences",
    "PolicyModule",
    "SequenceScoreModule",
    "StepResult",
    "TrainEngine",
    "ValueModule",
    "balance_rows",
    "data_parallel_order",
    "pack_for_responses",
    "pack_for_targets",
    "plan_micro_batches",
    "synchronized_micro_batches",
]
