"""Generation for RL: the native continuous-batching engine, the transformers reference
engine, and the rollout role with weight refresh from the actor."""

from ascent.rollout.config import RolloutConfig
from ascent.rollout.engine import NativeEngine
from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.types import Sample, SamplingParams
from ascent.rollout.weight_sync import sync_weights
from ascent.rollout.worker import RolloutWorker

__all__ = [
    "NativeEngine",
    "RolloutConfig",
    "RolloutWorker",
    "Sample",
    "SamplingParams",
    "TransformersEngine",
    "sync_weights",
]
