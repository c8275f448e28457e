"""A request as the native engine schedules it: one prompt, its ``n`` samples, and where the
results go."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ascent.rollout.types import Sample, SamplingParams

# Called on the engine's thread: (sample_index, new token id, its log-prob, weight version,
# its top alternatives: (id, log-prob) pairs, empty unless the request asks for them).
TokenCallback = Callable[[int, int, float, int, list[tuple[int, float]]], None]


@dataclass(eq=False)
class EngineRequest:
    """``params.n`` samples of ``prompt`` (token ids).

    on_sample: called once per sample when it finishes (on the thread running the engine).
    on_token: called for every sampled token (streaming); None when nobody streams.
    generator: the random stream its rows draw their uniforms from, one per row and step in
        row order (requests of a seeded batch call share one), which keeps a seeded caller's
        results reproducible. None: the engine's own stream.
    index: the ``prompt_index`` written into this request's samples.
    images: data URLs of the prompt's images, in the order of its image tokens (a
        vision-language model); ``vision`` is what the engine prepared from them.
    top_logprobs: also keep, for every sampled token, the k most likely tokens of the
        distribution it was sampled from (``Sample.top_logprobs``; ``ascent serve``'s
        ``logprobs`` / ``top_logprobs``); 0: none, and no cost.
    """

    prompt: list[int]
    params: SamplingParams
    on_sample: Callable[[Sample], None]
    on_token: TokenCallback | None = None
    generator: torch.Generator | None = None
    index: int = 0
    images: tuple[str, ...] = ()
    top_logprobs: int = 0
    vision: Any = field(default=None, init=False)
    aborted: bool = field(default=False, init=False)
    error: BaseException | None = field(default=None, init=False)  # why the engine failed it

    @property
    def rope_shift(self) -> int:
        """How far its generated tokens' rotary positions are from their token indices
        (multimodal RoPE; 0 for text)."""
        return 0 if self.vision is None else self.vision.delta

    @property
    def prefix_salt(self) -> int | None:
        """What tells its cached prefix apart beyond the token ids: its images."""
        return hash(self.images) if self.images else None
