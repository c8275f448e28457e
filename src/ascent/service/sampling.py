"""Sampling clients of the Tinker service: a session samples one set of weights (a
snapshot of a trained model, a named sampler checkpoint, or the base model) with ascent's
native engine, and returns every sampled token's log-prob (what an RL loop trains on).

Each session's weights are a transformers checkpoint on disk (the merged weights of its
model when it was made), so a session outlives the engine that served it: at most
``sampling.engines`` engines stay loaded, the least recently used one closed first, and a session
whose engine was closed loads it again. Of a model's snapshot sessions
(``save_weights_and_get_sampling_client``, one per RL step) only the newest few are kept,
weights and all (``retire_snapshots``).

A sample request maps onto the engine's sampling parameters: ``max_tokens``, ``temperature``,
``top_p``, ``top_k`` (-1: all tokens), ``seed``, and ``stop`` as strings or token ids; its
result is the SDK's ``SampleResponse`` (protobuf): each sequence's tokens, log-probs and
stop reason, and with ``prompt_logprobs`` each prompt token's log-prob (NaN at the first).
"""

import asyncio
import shutil
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ascent.engine.config import ModelConfig
from ascent.rollout.engine import NativeEngine
from ascent.rollout.engine_settings import EngineLimits, EngineSettings
from ascent.rollout.native_backend import NativeBackend
from ascent.rollout.types import SamplingParams
from ascent.service.config import SamplingSettings
from ascent.service.sessions import session_of
from ascent.service.wire import WireError, protos


@dataclass(frozen=True)
class SamplingSession:
    session_id: str
    base_model: str
    weights: Path  # a transformers checkpoint directory
    model_path: str | None  # its tinker:// path, when it has one


def prompt_ids(prompt: dict) -> list[int]:
    ids: list[int] = []
    for index, chunk in enumerate(prompt.get("chunks", [])):
        if chunk.get("type", "encoded_text") != "encoded_text":
            raise WireError(f"prompt chunk {index}: {chunk.get('type')} chunks are not served")
        ids.extend(int(t) for t in chunk["tokens"])
    if not ids:
        raise WireError("the prompt is empty")
    return ids


def sampling_params(request: dict) -> SamplingParams:
    """The engine's parameters for a ``sample`` request (module docstring)."""
    given = request.get("sampling_params", {})
    stop = given.get("stop")
    stop = [stop] if isinstance(stop, str) else list(stop or [])
    strings = [s for s in stop if isinstance(s, str)]
    tokens = [int(s) for s in stop if not isinstance(s, str)]
    return SamplingParams(
        n=int(request.get("num_samples", 1)),
        temperature=float(given.get("temperature", 1.0)),
        top_p=float(given.get("top_p", 1.0)),
        top_k=max(int(given.get("top_k", -1)), 0),
        max_new_tokens=int(given.get("max_tokens") or 256),
        stop=strings,
        stop_token_ids=tokens,
        seed=given.get("seed"),
    )


class Samplers:
    """Sampling sessions and the engines that serve them (module docstring)."""

    def __init__(self, settings: SamplingSettings, model: ModelConfig, device: str) -> None:
        """``settings``: the engines' limits and how many stay loaded; ``model``: how the
        base checkpoint loads (each session's weights load the same way, from their path)."""
        self.settings, self.model, self.device = settings, model, torch.device(device)
        self.sessions: dict[str, SamplingSession] = {}
        self.loaded: OrderedDict[Path, NativeBackend] = OrderedDict()
        self.busy: Counter[str] = Counter()  # session -> its requests being sampled

    def add(self, session: SamplingSession) -> None:
        self.sessions[session.session_id] = session

    def retire_snapshots(self, directory: Path) -> None:
        """Keep the ``snapshots_kept`` newest snapshot sessions whose weights lie in
        ``directory`` (a model's ``sampler_sessions``); close and delete the older ones. An
        RL loop makes a session per step and never goes back: without this, every step's
        merged weights would stay on disk."""
        snapshots = [s for s in self.sessions.values() if s.weights.parent == directory]
        keep = self.settings.snapshots_kept
        for old in snapshots[: max(len(snapshots) - keep, 0)]:
            if self.busy[old.session_id]:
                continue  # still sampling: retired by a later call
            del self.sessions[old.session_id]
            backend = self.loaded.pop(old.weights, None)
            if backend is not None:
                asyncio.run(backend.close())
            shutil.rmtree(old.weights, ignore_errors=True)

    def forget(self, client_session: str) -> None:
        """Drop the sampling sessions a client session opened (it ended), and the engines
        no session uses any more."""
        for session_id in [s for s in self.sessions if session_of(s) == client_session]:
            if not self.busy[session_id]:  # one still sampling keeps its engine
                del self.sessions[session_id]
        used = {s.weights for s in self.sessions.values()}
        for weights in [w for w in self.loaded if w not in used]:
            asyncio.run(self.loaded.pop(weights).close())

    def close(self) -> None:
        """Close every engine."""
        while self.loaded:
            asyncio.run(self.loaded.popitem()[1].close())

    def backend(self, session: SamplingSession) -> NativeBackend:
        """The engine of ``session``'s weights, loaded if it is not (call off the event
        loop: loading takes seconds)."""
        if session.weights in self.loaded:
            self.loaded.move_to_end(session.weights)
            return self.loaded[session.weights]
        while len(self.loaded) >= self.settings.engines:
            _, oldest = self.loaded.popitem(last=False)
            asyncio.run(oldest.close())  # its step thread ends (this is a worker thread)
        from ascent.models.loading import load_tokenizer

        limits = self.settings.model_dump(include=set(EngineLimits.model_fields))
        model = self.model.model_copy(update={"path": str(session.weights)})
        settings = EngineSettings(model=model, **limits)
        tokenizer = load_tokenizer(str(session.weights))
        backend = NativeBackend(NativeEngine.load(settings, self.device, tokenizer), tokenizer)
        self.loaded[session.weights] = backend
        return backend


async def sample(
    backend: NativeBackend, ids: list[int], params: SamplingParams, prompt_logprobs: bool
) -> bytes:
    """``SampleResponse`` bytes of sampling ``params`` after the prompt ``ids`` (module
    docstring)."""
    outs = await backend.generate_n(ids, params)
    pb = protos()
    response = pb.SampleResponse()
    for out in outs:
        sequence = response.sequences.add()
        sequence.stop_reason = (
            pb.STOP_REASON_LENGTH if out.finish_reason == "length" else pb.STOP_REASON_STOP
        )
        sequence.tokens = np.asarray(out.token_ids, dtype=np.int32).tobytes()
        sequence.logprobs = np.asarray(out.log_probs, dtype=np.float32).tobytes()
    if prompt_logprobs:
        scores = await backend.score(ids, 0)
        values = [np.nan if v is None else v for v in scores.log_probs]
        response.prompt_logprobs = np.asarray(values, dtype=np.float32).tobytes()
    return response.SerializeToString()


def sampler_info(session: SamplingSession) -> dict[str, Any]:
    return {
        "sampler_id": session.session_id,
        "base_model": session.base_model,
        "model_path": session.model_path,
    }
