"""What the Tinker service holds: sessions, trained models (each a worker group of its own,
so concurrent clients never share weights or optimiser state), futures, and checkpoints
under ``root`` by their ``tinker://`` paths.

Ids are the SDK's: a session ``sess-<n>``; a model ``<session>:train:<n>`` (the client
derives it itself when it resumes from a checkpoint); a checkpoint
``tinker://<model>/weights/<name>`` (training state) or ``.../sampler_weights/<name>``
(merged weights), stored at ``root/<model>/weights/<name>``.
"""

import asyncio
import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ascent.controller import ResourcePool, WorkerGroup, spawn_group
from ascent.service.futures import Futures, Sequenced
from ascent.service.model_worker import TinkerModelWorker
from ascent.service.sampling import Samplers, SamplingSession


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


SCHEME = "tinker://"


class UnknownId(KeyError):
    """An id the server does not hold (answered 404)."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass
class TrainedModel:
    model_id: str
    base_model: str
    lora: dict | None
    group: WorkerGroup
    calls: Sequenced

    def info(self) -> dict[str, Any]:
        rank = None if self.lora is None else self.lora["rank"]
        return {
            "type": "get_info",
            "model_id": self.model_id,
            "model_data": {"arch": "ascent", "model_name": self.base_model},
            "is_lora": self.lora is not None,
            "lora_rank": rank,
            "model_name": self.base_model,
        }


@dataclass
class ServiceState:
    base_models: dict[str, str]  # name the client asks for -> local checkpoint directory
    root: Path  # where checkpoints are written
    poll_s: float = 20.0  # how long a retrieve_future is held while the call runs
    tokens_per_micro_batch: int = 8192
    sessions: itertools.count = field(default_factory=itertools.count)
    models: dict[str, TrainedModel] = field(default_factory=dict)
    futures: Futures = field(default_factory=Futures)
    # torch work runs here, one call at a time: models interleave call by call
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1))
    samplers: Samplers = field(default_factory=lambda: Samplers(default_device()))

    def new_session(self) -> str:
        return f"sess-{next(self.sessions)}"

    def base_path(self, name: str) -> str:
        if name not in self.base_models:
            raise UnknownId(
                f"unknown base model {name!r}; this server has {sorted(self.base_models)}"
            )
        return self.base_models[name]

    def model(self, model_id: str) -> TrainedModel:
        if model_id not in self.models:
            raise UnknownId(f"unknown model id {model_id!r}")
        return self.models[model_id]

    async def create_model(self, model_id: str, base_model: str, lora: dict | None) -> TrainedModel:
        settings = {
            "path": self.base_path(base_model),
            "lora": lora,
            "tokens_per_micro_batch": self.tokens_per_micro_batch,
        }
        loop = asyncio.get_running_loop()
        group = await loop.run_in_executor(
            self.executor,
            lambda: spawn_group(
                TinkerModelWorker, ResourcePool(), args=(settings,), backend="in-process"
            ),
        )
        model = TrainedModel(model_id, base_model, lora, group, Sequenced(self.executor))
        self.models[model_id] = model
        return model

    def checkpoint(self, model_id: str, kind: str, name: str) -> tuple[str, Path]:
        """(tinker path, directory) of checkpoint ``name`` of ``kind`` (weights or
        sampler_weights)."""
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"checkpoint name {name!r}: use a plain name (no '/')")
        return f"{SCHEME}{model_id}/{kind}/{name}", self.root / model_id / kind / name

    def sampling_session(self, session_id: str) -> SamplingSession:
        if session_id not in self.samplers.sessions:
            raise UnknownId(f"unknown sampling session {session_id!r}")
        return self.samplers.sessions[session_id]

    def resolve(self, path: str) -> tuple[str, Path]:
        """A ``tinker://`` path -> (the model id it belongs to, its directory)."""
        parts = path[len(SCHEME) :].split("/") if path.startswith(SCHEME) else []
        if len(parts) != 3 or parts[1] not in ("weights", "sampler_weights"):
            raise ValueError(f"{path!r} is not a tinker://<model>/weights/<name> path")
        directory = self.root / parts[0] / parts[1] / parts[2]
        if not directory.is_dir():
            raise UnknownId(f"no checkpoint at {path!r}")
        return parts[0], directory
