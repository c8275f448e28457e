"""The transformers reference engine as a backend: whole batches only (``generate``
decodes static batches), so it serves ``generate_batch`` and no request-level calls."""

from collections.abc import Iterable

from torch import Tensor

from ascent.rollout.hf_engine import TransformersEngine
from ascent.rollout.protocol import Capability, Images, RolloutBackend, refuse_images
from ascent.rollout.types import Sample, SamplingParams


class TransformersBackend(RolloutBackend):
    name = "transformers engine"
    # Not request-level: no generate_n (agents and generation beside training need one).
    capabilities = frozenset({Capability.REFRESH_WEIGHTS})

    def __init__(self, engine: TransformersEngine) -> None:
        self.engine = engine
        self.tokenizer = engine.tokenizer

    def generate_batch(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images = None
    ) -> list[Sample]:
        refuse_images(self, images)
        return self.engine.generate(prompts, sampling)

    @property
    def version(self) -> int:
        return self.engine.weight_version

    async def refresh_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        version: int,
        *,
        alias: bool = False,
    ) -> int:
        """Copied in, every parameter required (a reference engine: no aliasing)."""
        return self.engine.load_weights(named_tensors, version=version)
