"""A request as the native engine schedules it: one prompt, its ``n`` samples, and where the
results go."""

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ascent.models.families.spec import TEXT_PROMPT, PreparedPrompt
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
        vision-language model); ``prepared`` is what the model's family made of the prompt
        (``PreparedPrompt``: its rotary shift and how the prefix cache names its tokens).
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
    prepared: PreparedPrompt = field(default=TEXT_PROMPT, init=False)
    aborted: bool = field(default=False, init=False)
    error: BaseException | None = field(default=None, init=False)  # why the engine failed it

    @property
    def rope_shift(self) -> int:
        """How far its generated tokens' rotary positions are from their token indices."""
        return self.prepared.rope_shift

    def prefix_tokens(self, tokens: list[int], start: int = 0, stop: int | None = None) -> list:
        """``tokens[start:stop]`` of its sequence (the prompt, then generated ids) as the
        prefix cache names them (``PreparedPrompt.prefix_tokens``: image tokens by image)."""
        return self.prepared.prefix_tokens(tokens, start, stop)
