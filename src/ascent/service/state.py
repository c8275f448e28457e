"""What the Tinker service holds: sessions, trained models (each a worker group of its own,
so concurrent clients never share weights or optimiser state), futures, and checkpoints
under ``root`` by their ``tinker://`` paths.

Each model's ranks come from the config's ``resources`` (one device: in this process;
more: over Ray, a process per rank), its engine from ``training``.

Ids are the SDK's: a session ``sess-<start>-<n>`` (``ascent.service.sessions``); a model
``<session>:train:<n>`` (the client derives it itself when it resumes from a checkpoint); a
checkpoint ``tinker://<model>/weights/<name>`` (training state) or
``.../sampler_weights/<name>`` (merged weights), stored at ``root/<model>/weights/<name>``.
"""

import asyncio
import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascent.controller import WorkerGroup, spawn_group
from ascent.service.config import ServiceConfig
from ascent.service.futures import Futures, Sequenced
from ascent.service.model_worker import TinkerModelWorker
from ascent.service.sampling import Samplers, SamplingSession
from ascent.service.sessions import Sessions, session_of

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
    config: ServiceConfig
    models: dict[str, TrainedModel] = field(default_factory=dict)
    futures: Futures = field(default_factory=Futures)
    # torch work runs here, one call at a time: models interleave call by call
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1))
    samplers: Samplers = field(init=False)
    sessions: Sessions = field(init=False)
    base_models: dict[str, str] = field(init=False)  # name clients use -> checkpoint directory

    def __post_init__(self) -> None:
        self.base_models = {self.config.served_name(): self.config.model.path}
        self.sessions = Sessions(self.config.session_timeout_s)
        self.samplers = Samplers(
            self.config.sampling, self.config.model, self.config.resources.device
        )

    @property
    def root(self) -> Path:
        """Where checkpoints are written (``config.root``)."""
        return Path(self.config.root)

    @property
    def poll_s(self) -> float:
        return self.config.poll_s

    async def end_session(self, session_id: str) -> None:
        """Free what ``session_id`` held (``ascent.service.sessions``); its calls already
        queued run first."""
        if not self.sessions.finish(session_id):
            return
        ended = [m for m in self.models.values() if session_of(m.model_id) == session_id]
        for model in ended:
            del self.models[model.model_id]

        def free() -> None:
            for model in ended:
                model.group.shutdown()
                shutil.rmtree(self.root / model.model_id / "sampler_sessions", ignore_errors=True)
            self.samplers.forget(session_id)

        await asyncio.get_running_loop().run_in_executor(self.executor, free)

    def close(self) -> None:
        """Stop every model's ranks and every engine (the server is stopping)."""
        for model in self.models.values():
            model.group.shutdown()
        self.models.clear()
        self.samplers.close()
        self.executor.shutdown(wait=False, cancel_futures=True)

    def base_path(self, name: str) -> str:
        if name not in self.base_models:
            raise UnknownId(
                f"unknown base model {name!r}; this server has {sorted(self.base_models)}"
            )
        return self.base_models[name]

    def model(self, model_id: str) -> TrainedModel:
        if model_id not in self.models:
            self.sessions.check(session_of(model_id))
            raise UnknownId(f"unknown model id {model_id!r}")
        return self.models[model_id]

    async def create_model(self, model_id: str, base_model: str, lora: dict | None) -> TrainedModel:
        self.sessions.check(session_of(model_id))
        config = self.config
        base = config.model.model_copy(update={"path": self.base_path(base_model)})
        resources = config.resources
        loop = asyncio.get_running_loop()
        group = await loop.run_in_executor(
            self.executor,
            lambda: spawn_group(
                TinkerModelWorker,
                resources.pool(),
                args=(base, config.training, lora),
                backend=resources.backend,
                ray_address=resources.ray_address,
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
            self.sessions.check(session_of(session_id))
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
