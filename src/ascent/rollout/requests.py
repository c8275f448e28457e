"""A request as the native engine schedules it: one prompt, its ``n`` samples, and where the
results go."""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ascent.rollout.types import Sample, SamplingParams

# Called on the engine's thread: (sample_index, new token id, its log-prob, weight version).
TokenCallback = Callable[[int, int, float, int], None]


@dataclass(eq=False)
class EngineRequest:
    """``params.n`` samples of ``prompt`` (token ids).

    on_sample: called once per sample when it finishes (on the thread running the engine).
    on_token: called for every sampled token (streaming); None when nobody streams.
    generator: the random stream its rows draw their uniforms from, one per row and step in
        row order (requests of a seeded batch call share one), which keeps a seeded caller's
        results reproducible. None: the engine's own stream.
    index: the ``prompt_index`` written into this request's samples.
    """

    prompt: list[int]
    params: SamplingParams
    on_sample: Callable[[Sample], None]
    on_token: TokenCallback | None = None
    generator: torch.Generator | None = None
    index: int = 0
    aborted: bool = field(default=False, init=False)
    error: BaseException | None = field(default=None, init=False)  # why the engine failed it
