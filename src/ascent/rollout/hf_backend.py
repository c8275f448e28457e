"""The transformers reference engine as a backend: whole batches only (``generate``
decodes static batches), so it serves ``generate_batch`` and no request-level calls."""

from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.protocol import RolloutBackend
from ascent.rollout.types import Sample, SamplingParams


class TransformersBackend(RolloutBackend):
    name = "transformers engine"
    request_level = False  # no generate_n: agents and generation beside training need one

    def __init__(self, engine: TransformersEngine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer

    def generate_batch(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Sample]:
        return self.engine.generate(prompts, sampling)
