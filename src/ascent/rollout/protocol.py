"""The rollout protocol: what every generation backend offers, in-process or over HTTP.

Data plane (every backend): ``generate`` one response token-in/token-out with log-probs,
``generate_n`` for the n samples of one prompt (prefilled once where the backend can),
``chat`` (messages in, the assistant message and its exact token trace out), and the
synchronous ``generate_batch`` that the RL worker calls. All awaitables accept many callers
at once.

Control plane: each operation is a ``Capability`` that a backend declares; calling one it
lacks raises ``CapabilityError`` naming the backend and the capability. Pause modes follow
vLLM's: "abort" ends in-flight requests now (their partial responses return with finish
reason "abort"), "wait" stops admitting and lets in-flight requests finish, "keep" freezes
them where they are until ``resume``.

The RL rollout role needs one more call: ``refresh_weights``, the trained policy's new
weights stamped with the version the trainer assigns (``weight_update`` receives them in
buckets), and ``call`` runs any of these from synchronous code.
"""

import asyncio
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from torch import Tensor

from ascent.rollout.tool_calls import assistant_message
from ascent.rollout.types import Sample, SamplingParams

PauseMode = Literal["abort", "wait", "keep"]
Images = list[list[str]] | None  # per prompt, its images as data URLs (vision-language models)


def refuse_images(backend: "RolloutBackend", images: Any) -> None:
    """ValueError for images given to a backend that does not take them (yet)."""
    if images and any(images):
        raise ValueError(
            f"the {backend.name} does not take images; generate from a vision-language model "
            "with rollout.engine=native or vllm"
        )


class Capability(StrEnum):
    """What a backend can do. The control plane's calls (``pause`` ... ``health``) raise
    ``CapabilityError`` where missing; the rest say what the data plane offers, and the
    trainer's checks ask for them (``ascent.rollout.backends.engine_capabilities``), never
    for an engine by name."""

    PAUSE = "pause"  # pause(mode) / resume()
    UPDATE_WEIGHTS_IN_PLACE = "update_weights_in_place"  # named tensors in this process
    UPDATE_WEIGHTS_FROM_DISK = "update_weights_from_disk"  # a safetensors directory
    WEIGHT_VERSION = "weight_version"
    TOKEN_WEIGHT_VERSIONS = "token_weight_versions"  # versions may change mid-response
    SLEEP = "sleep"  # release generation memory / take it back
    HEALTH = "health"
    # the data plane
    REFRESH_WEIGHTS = "refresh_weights"  # follows the trained policy (refresh_weights)
    REQUEST_LEVEL = "request_level"  # serves generate_n per request (agents, async)
    IMAGES = "images"  # generates from prompts with images (a vision-language model)
    ROUTE_RECORDING = "route_recording"  # each token's experts (Sample.routed_experts)
    WEIGHT_ALIASING = "weight_aliasing"  # may keep a colocated trainer's tensors uncopied
    OPENAI_ROUTES = "openai_routes"  # ascent's OpenAI routes serve it (serve, the agent gateway)


class CapabilityError(RuntimeError):
    """A control-plane call the backend does not support."""


@dataclass(frozen=True)
class TokenOut:
    """One response. ``log_probs[t]`` is log p(token_ids[t]) under the distribution it was
    sampled from (see ``Sample``); ``weight_versions[t]`` the weights that produced it;
    ``top_logprobs[t]`` that distribution's most likely tokens, where asked for (the native
    engine's ``EngineRequest.top_logprobs``), else None."""

    token_ids: list[int]
    log_probs: list[float]
    finish_reason: str
    weight_versions: list[int] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] | None = None

    @property
    def weight_version(self) -> int | None:
        return self.weight_versions[-1] if self.weight_versions else None

    @classmethod
    def of(cls, sample: Sample) -> "TokenOut":
        versions = sample.weight_versions
        if versions is None:
            versions = [sample.weight_version] * len(sample.token_ids)
        log_probs = sample.log_probs or []
        return cls(sample.token_ids, log_probs, sample.finish_reason, versions, sample.top_logprobs)


@dataclass(frozen=True)
class StreamedToken:
    """One token of a streamed response, as it is sampled: its log-prob, the weights that
    sampled it, and its top alternatives (empty unless asked for)."""

    token: int
    log_prob: float
    weight_version: int
    top_logprobs: list[tuple[int, float]] = field(default_factory=list)


@dataclass(frozen=True)
class ChatOut:
    """The assistant's reply: ``message`` as an OpenAI chat message (``content``, and
    ``tool_calls`` when it called tools), the rendered ``prompt_ids`` and the response's
    tokens (``output``): the exact trace the message came from, for training."""

    message: dict
    prompt_ids: list[int]
    output: TokenOut


class RolloutBackend:
    """Shared behaviour; a backend implements ``generate_n`` and the capabilities it lists.

    name: how errors refer to it. tokenizer: needed by ``chat`` (renders the chat template,
    decodes the reply).
    """

    name = "rollout backend"
    capabilities: frozenset[Capability] = frozenset()
    tokenizer: object | None = None
    engine: object | None = None  # the engine, when it runs in this process
    version = 0  # the version of the weights held now (the last refresh's)

    @classmethod
    def refuses_model(cls, model_type: str) -> str | None:
        """Why this backend cannot generate from a model of ``model_type`` (a sentence
        naming what can), or None: it can (the default: it runs any transformers model)."""
        return None

    # -- data plane -------------------------------------------------------------------------

    async def generate_n(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        session_id: str | None = None,
        images: list[str] | None = None,
    ) -> list[TokenOut]:
        """``sampling.n`` responses to ``prompt_ids``; ``images``: the prompt's images as
        data URLs, in the order of its image tokens (a vision-language model)."""
        raise NotImplementedError

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        session_id: str | None = None,
        images: list[str] | None = None,
    ) -> TokenOut:
        """One response to ``prompt_ids``. ``session_id`` keeps the turns of one conversation
        on one server (its prefix cache); backends with a single engine ignore it.
        ``images``: as for ``generate_n``."""
        if sampling.n != 1:
            raise ValueError(
                f"generate returns one response; sampling.n={sampling.n}: use generate_n"
            )
        return (await self.generate_n(prompt_ids, sampling, session_id, images=images))[0]

    async def chat(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        sampling: SamplingParams | None = None,
        session_id: str | None = None,
    ) -> ChatOut:
        """Render ``messages`` (and ``tools``) with the model's chat template, generate, and
        parse the reply's tool calls (Hermes ``<tool_call>`` JSON blocks)."""
        if self.tokenizer is None:
            raise ValueError(f"{self.name}: chat needs a tokenizer")
        prompt_ids = render_chat(self.tokenizer, messages, tools)
        out = await self.generate(prompt_ids, sampling or SamplingParams(), session_id)
        text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
        return ChatOut(assistant_message(text, bool(tools)), prompt_ids, out)

    def generate_batch(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images = None
    ) -> list[Sample]:
        """``sampling.n`` samples of every prompt, ordered by prompt then sample (the RL
        worker's call); ``images``: each prompt's images (data URLs), or None. With a seed,
        prompt i samples with seed + i, so prompts do not share random draws."""
        return self.call(self._gather(prompts, sampling, images))

    async def generate_together(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images = None
    ) -> list[Sample]:
        """``generate_batch`` from a running event loop. An in-process engine admits the
        prompts as one batch before its first decode step, so the samples do not depend on
        when requests arrive (the native engine: the same samples as ``generate_batch``); over
        HTTP the server batches requests as they come."""
        return await self._gather(prompts, sampling, images)

    async def _gather(
        self, prompts: list[list[int]], sampling: SamplingParams, images: Images = None
    ) -> list[Sample]:
        images = images or [None] * len(prompts)
        groups = await asyncio.gather(
            *(
                self.generate_n(p, seed_of_prompt(sampling, i), images=urls or None)
                for i, (p, urls) in enumerate(zip(prompts, images, strict=True))
            )
        )
        return samples_of(groups)

    # -- control plane ----------------------------------------------------------------------

    def _require(self, capability: Capability) -> None:
        if capability not in self.capabilities:
            have = ", ".join(sorted(self.capabilities)) or "none"
            raise CapabilityError(
                f"the {self.name} cannot {capability.value.replace('_', ' ')} "
                f"(its capabilities: {have})"
            )

    async def pause(self, mode: PauseMode = "abort") -> None:
        self._require(Capability.PAUSE)

    async def resume(self) -> None:
        self._require(Capability.PAUSE)

    # Weight refresh: ``version`` is the trainer's number for the new weights, and every token
    # they sample carries it; the backend stamps what it is told and keeps no numbering of its
    # own (only a stand-alone ``ascent serve`` counts on for a client that sends none).

    async def update_weights(
        self, named_tensors: Iterable[tuple[str, Tensor]], version: int
    ) -> int:
        self._require(Capability.UPDATE_WEIGHTS_IN_PLACE)
        raise NotImplementedError

    async def update_weights_from_disk(self, path: str, version: int) -> int:
        self._require(Capability.UPDATE_WEIGHTS_FROM_DISK)
        raise NotImplementedError

    async def weight_version(self) -> int:
        self._require(Capability.WEIGHT_VERSION)
        raise NotImplementedError

    async def set_weight_version(self, version: int) -> None:
        """Call the weights held now ``version``."""
        self._require(Capability.WEIGHT_VERSION)
        raise NotImplementedError

    async def sleep(self) -> None:
        self._require(Capability.SLEEP)

    async def wake(self) -> None:
        self._require(Capability.SLEEP)

    async def health(self) -> dict:
        self._require(Capability.HEALTH)
        return {}

    # The trained policy's weights (the RL rollout role's calls).

    async def refresh_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        version: int,
        *,
        alias: bool = False,
    ) -> int:
        """Replace every weight with ``named_tensors``, stamped ``version``; returns it.
        Requests in flight never see half-new weights: they wait where they are or go on
        under the new weights from the next token. ``alias``: the caller will not change the
        tensors while this backend generates, so an in-process engine may keep them instead
        of copying (others copy)."""
        raise CapabilityError(f"the {self.name} cannot load new weights")

    def weight_update(self, version: int) -> "WeightReceiver":
        """A refresh that arrives in parts (buckets from another device): by default gathered,
        then applied at once by ``refresh_weights`` when finished."""
        return GatheredWeights(self, version)

    def call(self, coroutine: Coroutine) -> Any:
        """Run one of this backend's coroutines from synchronous code (the RL worker): on a
        loop of its own, whose connections are released before it ends."""

        async def run() -> Any:
            try:
                return await coroutine
            finally:
                await self.release_connections()

        return asyncio.run(run())

    async def close(self) -> None:
        """Release what the backend started (threads, servers, connections)."""

    async def release_connections(self) -> None:
        """Drop what is bound to the running event loop (``asyncio.run`` is about to end
        it); in-process backends hold nothing of the kind."""


class WeightReceiver:
    """A refresh in parts: ``load`` each bucket, then ``finish`` returns the new version."""

    def load(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        raise NotImplementedError

    def finish(self) -> int:
        raise NotImplementedError


class GatheredWeights(WeightReceiver):
    """Buckets kept until the last, then one ``refresh_weights``: a server reloads whole, and
    an engine that is decoding never holds half-new weights."""

    def __init__(self, backend: RolloutBackend, version: int) -> None:
        self.backend, self.version = backend, version
        self.tensors: dict[str, Tensor] = {}

    def load(self, named_tensors: Iterable[tuple[str, Tensor]]) -> None:
        self.tensors.update(named_tensors)

    def finish(self) -> int:
        refresh = self.backend.refresh_weights(self.tensors.items(), self.version)
        return self.backend.call(refresh)


def seed_of_prompt(sampling: SamplingParams, index: int) -> SamplingParams:
    """The sampling of prompt ``index`` of a batch sent request by request: seed + index, so
    the prompts do not share random draws and each prompt's draws do not depend on when
    the others arrive (None stays None: the engine's own stream)."""
    if sampling.seed is None:
        return sampling
    return sampling.model_copy(update={"seed": sampling.seed + index})


def samples_of(groups: list[list[TokenOut]]) -> list[Sample]:
    """Each prompt's responses (``generate_n`` results, in prompt order) as ``Sample``s
    ordered by prompt then sample."""
    return [
        Sample(
            i,
            s,
            o.token_ids,
            o.log_probs,
            o.finish_reason,
            o.weight_version or 0,
            o.weight_versions,
        )
        for i, outs in enumerate(groups)
        for s, o in enumerate(outs)
    ]


def render_chat(tokenizer: object, messages: list[dict], tools: list[dict] | None) -> list[int]:
    """The chat template's token ids for ``messages`` with the assistant prompt appended."""
    ids = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    return list(ids)
