"""The generation service: the native continuous-batching engine, the transformers reference
engine, the ``ascent serve`` / vLLM / OpenAI-endpoint backends behind one protocol
(``start_backend`` builds any of them), and weight refresh. The RL rollout role that uses
it is ``ascent.workers.rollout``."""

from ascent.rollout.config import GenerationConfig
from ascent.rollout.engine import NativeEngine
from ascent.rollout.engine_settings import EngineLimits
from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.types import Sample, SamplingParams
from ascent.rollout.weight_sync import sync_weights

__all__ = [
    "EngineLimits",
    "GenerationConfig",
    "NativeEngine",
    "Sample",
    "SamplingParams",
    "TransformersEngine",
    "sync_weights",
]
