"""The transformers reference engine as a backend: whole batches only (``generate``
decodes static batches), so it serves ``generate_batch`` and no request-level calls."""

from collections.abc import Iterable

import torch
from torch import Tensor

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

    @property
    def version(self) -> int:
        return self.engine.weight_version

    async def refresh_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        version: int | None = None,
        *,
        alias: bool = False,
    ) -> int:
        """Copy every weight in (a reference engine: no aliasing); all must arrive."""
        params = dict(self.engine.model.named_parameters())
        seen = set()
        with torch.no_grad():
            for name, tensor in named_tensors:
                if name not in params:
                    raise KeyError(f"the rollout model has no parameter {name!r}")
                params[name].copy_(tensor)
                seen.add(name)
        missing = sorted(set(params) - seen)
        if missing:
            raise ValueError(f"weights missing for {len(missing)} parameters, e.g. {missing[:3]}")
        self.engine.weight_version = self.engine.weight_version + 1 if version is None else version
        return self.engine.weight_version
