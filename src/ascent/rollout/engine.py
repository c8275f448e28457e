"""The native rollout engine: continuous batching over a paged KV cache, request by request.

Requests (``add_request``) join a running batch (``Scheduler``) whenever they arrive; each
``step`` admits what waits and decodes one token for every running sequence; a sequence that
finishes frees its seat and blocks at once, so long responses never hold a batch back. The
samples of a prompt share its cached blocks, and a prompt that starts with context already
cached (an agent's next turn) prefills only what is new. ``generate`` is
the synchronous batch call on top (the RL worker's); ``NativeBackend`` runs the step loop on
a thread for many concurrent callers (``ascent serve``). Scheduling is deterministic: with a
seed, the same prompts and settings from one caller give the same samples.

Weights may be replaced between two steps while requests are in flight: every token records
the weight version that produced it.
"""

from collections.abc import Iterable
from typing import Protocol

import torch
from torch import Tensor, nn

from ascent.models.families.spec import PromptInputs
from ascent.models.loading import load_causal_lm
from ascent.rollout.decoder import DecoderRunner
from ascent.rollout.engine_settings import (
    TRAINING_ONLY,
    EngineLimits,
    EngineSettings,
    generation_dtype,
)
from ascent.rollout.kv_cache import PagedKVCache
from ascent.rollout.requests import EngineRequest
from ascent.rollout.scheduler import Scheduler
from ascent.rollout.scoring import TokenScores, score_tokens
from ascent.rollout.types import Sample, SamplingParams


def load_generation_model(settings: EngineSettings, device: torch.device) -> nn.Module:
    """The checkpoint of ``settings.model`` on ``device`` in the generation dtype, with its
    remote-code and attention-implementation choices."""
    return load_causal_lm(
        settings.model.path,
        dtype=generation_dtype(settings.dtype, device),
        trust_remote_code=settings.model.trust_remote_code,
        attn_implementation=settings.model.attn_implementation,
    ).to(device)


class NativeEngine:
    """Generates from a transformers ``model`` of a native family (``ascent.models.families``;
    its tensors are read in place), within ``limits`` (``EngineLimits``, whose fields and
    defaults are the engine settings' own; ``dtype`` is applied where a checkpoint is
    loaded: ``NativeEngine.load`` builds one from ``EngineSettings``).

    tokenizer: needed only for stop strings.
    model_dir: the checkpoint's directory, for what its family's prompts need from it (a
        vision-language model's image processor).
    """

    # Every other setting is applied by ``load``.
    not_applicable = TRAINING_ONLY

    def __init__(
        self,
        model: nn.Module,
        limits: EngineLimits | None = None,
        *,
        tokenizer: object | None = None,
        model_dir: str | None = None,
    ) -> None:
        limits = limits or EngineLimits()
        max_num_seqs, max_model_len = limits.max_num_seqs, limits.max_model_len
        self.model = model.eval().requires_grad_(False)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.runner = DecoderRunner(model, model_dir)
        self.vocab_size = model.get_input_embeddings().num_embeddings  # valid ids: [0, this)
        self.max_model_len = max_model_len
        self.tokenizer = tokenizer
        shape = self.runner.cache_shape
        self.cache = PagedKVCache(
            layers=len(self.runner.layers),
            kv_heads=shape.kv_heads,
            key_dim=shape.key_dim,
            value_dim=shape.value_dim,
            max_len=max_model_len,
            max_seqs=max_num_seqs,
            dtype=self.dtype,
            device=self.device,
            memory_bytes=limits.kv_cache_bytes,
            records=self.runner.route_shape,  # each position's expert routes, if it routes
        )
        self.cuda_graphs = limits.cuda_graphs  # asked for; used on CUDA only
        self.use_cuda_graphs = (
            limits.cuda_graphs and self.device.type == "cuda" and self.runner.graphable
        )
        self.graphs = None
        self.generator = torch.Generator(device=self.device)  # for requests without a seed
        self.generator.seed()
        self.scheduler = Scheduler(
            self.cache,
            lambda chunk: self.runner.prefill(self.cache, chunk),
            lambda *step: self.decode(*step),  # looked up per step
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            generator=self.generator,
            tokenizer=tokenizer,
        )

    @property
    def prompts(self) -> PromptInputs:
        """What the model's family makes of a prompt's inputs beyond its ids."""
        return self.runner.prompts

    @property
    def weight_version(self) -> int:
        """The version of the weights loaded: tokens sampled from now on record it."""
        return self.scheduler.weight_version

    @classmethod
    def load(
        cls, settings: EngineSettings, device: torch.device, tokenizer: object | None = None
    ) -> "NativeEngine":
        """The engine ``settings`` describe, its checkpoint loaded on ``device``."""
        return cls(
            load_generation_model(settings, device),
            settings,
            tokenizer=tokenizer,
            model_dir=settings.model.path,
        )

    # -- memory and weights -------------------------------------------------------------

    def sleep(self) -> None:
        """Release the KV cache, packed weights and the sampler's buffer (e.g. while the
        trainer runs); ``generate`` wakes it."""
        self.cache.sleep()
        self.scheduler.sampling_scratch.release()
        self.graphs = None  # captured against the freed cache
        self.runner.weights_changed()  # the trainer will change them anyway

    def wake(self) -> None:
        self.cache.wake()

    def reset_prefix_cache(self) -> None:
        """Forget the cached prefixes (blocks no running sequence holds become free): the
        next prompts compute everything, as after a weight refresh."""
        self.cache.blocks.forget_prefixes()

    def load_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        *,
        version: int,
        alias: bool = False,
    ) -> int:
        """Take a complete new set of weights, one tensor at a time, numbered ``version`` (as
        the trainer numbers its weights: stamped on every token they sample); returns it.

        ``alias=True`` makes each parameter share the given tensor's storage when shape,
        dtype and device match (no copy: a colocated, unsharded trainer's own tensors).
        """
        update = self.begin_weight_update()
        update.load(named_tensors, alias=alias)
        return update.finish(version)

    def set_weight_version(self, version: int) -> None:
        """Call the weights held now ``version`` (a new client's numbering)."""
        self.scheduler.weight_version = version

    def weights_changed(self, moved: bool) -> None:
        """New weights were loaded: what was built from the old ones goes (packed copies;
        with ``moved``, the parameters' storage changed, so captured CUDA graphs too)."""
        self.runner.weights_changed()
        if moved:
            self.graphs = None

    def begin_weight_update(self) -> "WeightUpdate":
        """Start a refresh that may arrive in several parts (buckets from another device)."""
        return WeightUpdate(self)

    def max_weight_difference(self, named_tensors: Iterable[tuple[str, Tensor]]) -> float:
        """Debug check after a refresh: the largest |engine - source| over all weights."""
        params = dict(self.model.named_parameters())
        return max(
            float((params[name].float() - tensor.to(params[name].device).float()).abs().max())
            for name, tensor in named_tensors
        )

    def decode(
        self,
        tokens: Tensor,
        positions: Tensor,
        tables: Tensor,
        slots: Tensor,
        rope_shift: Tensor | None = None,
    ) -> Tensor:
        """One decode step for the running sequences: CUDA graphs when enabled on CUDA,
        else the eager pass."""
        if rope_shift is not None:
            return self.runner.decode(self.cache, tokens, positions, tables, slots, rope_shift)
        if self.use_cuda_graphs:
            if self.graphs is None or self.graphs.stale:
                from ascent.rollout.cuda_graphs import GraphedDecoder

                self.graphs = GraphedDecoder(self.runner, self.cache)
            return self.graphs.decode(tokens, positions, tables, slots)
        return self.runner.decode(self.cache, tokens, positions, tables, slots)

    # -- generation ---------------------------------------------------------------------

    def check_request(self, prompt: list[int], sampling: SamplingParams, where: str) -> None:
        """Raise ValueError naming ``where`` for a request the engine cannot serve."""
        if not 0 < len(prompt) < self.max_model_len:
            raise ValueError(
                f"{where} has {len(prompt)} tokens; it needs 1 to "
                f"{self.max_model_len - 1} (max_model_len)"
            )
        self._check_ids(prompt, where)
        if sampling.stop and self.tokenizer is None:
            raise ValueError("stop strings need the engine to have a tokenizer")

    def score(self, ids: list[int], top_k: int) -> TokenScores:
        """Teacher-forced log-probs of ``ids`` and the ``top_k`` alternatives at each position
        (``ascent.rollout.scoring``); call it between steps (the backend's step thread)."""
        if not 0 < len(ids) <= self.max_model_len:
            raise ValueError(
                f"the scored text has {len(ids)} tokens; it needs 1 to "
                f"{self.max_model_len} (max_model_len)"
            )
        self._check_ids(ids, "the scored text")
        self.runner.prompts.prepare(ids, (), "the scored text")  # text only: no image tokens
        return score_tokens(self.runner, ids, top_k)

    def _check_ids(self, ids: list[int], where: str) -> None:
        """ValueError naming ``where`` and the position of a token id outside the
        vocabulary."""
        if not 0 <= min(ids) <= max(ids) < self.vocab_size:
            position, bad = next((i, t) for i, t in enumerate(ids) if not 0 <= t < self.vocab_size)
            raise ValueError(
                f"{where} has token id {bad} at position {position}; token ids must be in "
                f"[0, {self.vocab_size}) (the model's vocabulary size)"
            )

    def seeded_generator(self, sampling: SamplingParams) -> torch.Generator | None:
        """A random stream of its own for a seeded, sampled request; None: the engine's."""
        if sampling.temperature > 0 and sampling.seed is not None:
            return torch.Generator(device=self.device).manual_seed(sampling.seed)
        return None

    def add_request(self, request: EngineRequest) -> None:
        """Queue a request; it joins the running batch at the next ``step``."""
        where = f"prompt {request.index}"
        self.check_request(request.prompt, request.params, where)
        self.prepare_prompt(request, where)
        self._queue(request)

    def prepare_prompt(self, request: EngineRequest, where: str) -> None:
        """Prepare what the request's prompt brings beyond its ids (``request.images``), as
        the model's family does; ValueError naming ``where`` for inputs it cannot take."""
        request.prepared = self.runner.prompts.prepare(request.prompt, request.images, where)

    def _queue(self, request: EngineRequest) -> None:
        self.cache.wake()
        self.scheduler.add(request)

    def step(self) -> None:
        """Admit waiting requests, then decode one token for every running sequence."""
        self.scheduler.step()

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    @property
    def running(self) -> int:
        """Sequences in the running batch."""
        return self.scheduler.running

    def abort(self, request: EngineRequest) -> None:
        self.scheduler.abort(request)

    def discard(self, request: EngineRequest) -> None:
        """Finish, as aborted, a request that was never queued (each sample empty)."""
        self.scheduler.add(request)
        self.scheduler.abort(request)

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingParams,
        images: list[list[str]] | None = None,
    ) -> list[Sample]:
        """``sampling.n`` samples for every prompt (token ids; ``images``: each prompt's
        images as data URLs), ordered by prompt then sample."""
        images = images or [[] for _ in prompts]
        for index, prompt in enumerate(prompts):  # all of them before any is queued
            self.check_request(prompt, sampling, f"prompt {index}")
        generator = self.seeded_generator(sampling)  # one stream: reproducible per call
        done: list[Sample] = []
        requests = [
            EngineRequest(prompt, sampling, done.append, None, generator, index, tuple(urls))
            for index, (prompt, urls) in enumerate(zip(prompts, images, strict=True))
        ]
        for request in requests:
            self.prepare_prompt(request, f"prompt {request.index}")
        for request in requests:
            self._queue(request)
        try:
            while len(done) < len(prompts) * sampling.n:
                self.step()
        except Exception:  # the call fails whole: none of its requests stays in the batch
            for request in requests:
                self.scheduler.abort(request)
            raise
        return sorted(done, key=lambda s: (s.prompt_index, s.sample_index))


class WeightHolder(Protocol):
    """What a weight refresh needs of an engine (the native one, the transformers one)."""

    model: nn.Module

    @property
    def weight_version(self) -> int: ...

    def set_weight_version(self, version: int) -> None: ...

    def weights_changed(self, moved: bool) -> None: ...


class WeightUpdate:
    """A refresh in progress: parts load as they come; ``finish`` checks that every
    parameter arrived, tells the engine its weights changed (``moved``: a parameter now
    aliases another tensor) and stamps the version."""

    def __init__(self, engine: WeightHolder) -> None:
        self.engine = engine
        self.params = dict(engine.model.named_parameters())
        self.seen: set[str] = set()
        self.moved = False

    def load(self, named_tensors: Iterable[tuple[str, Tensor]], *, alias: bool = False) -> None:
        for name, tensor in named_tensors:
            param = self.params.get(name)
            if param is None:
                raise KeyError(f"the rollout model has no parameter {name!r}")
            tensor = tensor.detach()
            meta = (tensor.shape, tensor.dtype, tensor.device)
            if alias and meta == (param.shape, param.dtype, param.device):
                param.data = tensor
                self.moved = True  # captured graphs read the old storage
            else:
                param.data.copy_(tensor)
            self.seen.add(name)

    def finish(self, version: int) -> int:
        """Call the new weights ``version`` and return it."""
        missing = sorted(set(self.params) - self.seen)
        if missing:
            raise ValueError(f"weights missing for {len(missing)} parameters, e.g. {missing[:3]}")
        self.engine.weights_changed(self.moved)
        self.engine.set_weight_version(version)
        return version
