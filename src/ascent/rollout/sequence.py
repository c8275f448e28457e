"""What the native scheduler keeps per sequence: a running sample, and a prefill job."""

from dataclasses import dataclass, field

from ascent.rollout.requests import EngineRequest


@dataclass(eq=False)
class Running:
    """One sample in the running batch.

    tokens: prompt + generated ids; the last one's keys and values are not cached yet (the
    next decode step feeds it). cached: positions whose keys and values are in ``blocks``
    (the block table, in order). names: the prefix-index names of its full cached blocks,
    chained from ``root``.
    log_probs and versions: per generated token; alternatives too when the request asks for
    them (``EngineRequest.top_logprobs``). limit: the generated length that ends it.
    """

    request: EngineRequest
    sample_index: int
    prompt_length: int
    limit: int
    tokens: list[int]
    blocks: list[int] = field(default_factory=list)
    cached: int = 0
    names: list[int] = field(default_factory=list)
    root: int = 0  # the prefix index's root when its blocks were named
    log_probs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    alternatives: list[list[tuple[int, float]]] = field(default_factory=list)

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.prompt_length :]


@dataclass(eq=False)
class PrefillJob:
    """Context waiting for a prefill: the prompt of ``samples`` of ``request`` not started
    yet, or a preempted sequence (``resume``) whose whole context must be cached again."""

    request: EngineRequest
    samples: list[int]
    resume: Running | None = None

    @property
    def tokens(self) -> list[int]:
        return self.resume.tokens if self.resume is not None else self.request.prompt

    @property
    def seats(self) -> int:
        """Rows of the running batch it fills once prefilled."""
        return 1 if self.resume is not None else len(self.samples)
