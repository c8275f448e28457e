"""``ascent serve`` as the rollout backend (``rollout.engine: serve``): the native engine in
a server process of its own per rollout rank (or at ``rollout.server.urls``), followed
through HTTP.

What it has that vLLM lacks: a refresh (``POST /update_weights {"path", "version"}``) lands
between two decode steps of the running batch, and every token comes back with the version of
the weights that sampled it (``weight_versions``), so a response that spans an update in
flight (trainer.mode async) is measured token by token, as in process.

Versions are the trainer's: each refresh tells the servers what to call the new weights, and
they stamp it on every token. A client that connects to a running server first tells it to
call the weights it holds version 0 (``/update_weight_version``); a restarted server is given
the latest weights with their version before it serves again.

Keys (``ascent.serve.access``): a server started here is given a fresh random admin token
through its environment, which only this backend knows, and no API key; for servers at
``rollout.server.urls``, the backend sends ``$ASCENT_ADMIN_TOKEN`` on the control routes and
``$ASCENT_API_KEY`` on the ``/v1`` routes, when set: the variables the servers read theirs from.
"""

import os
import secrets
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import httpx
import torch

from ascent.models.families import native_refusal
from ascent.rollout.config import GenerationConfig
from ascent.rollout.engine_settings import EngineSettings
from ascent.rollout.http_backend import PolicyServers, bearer
from ascent.rollout.protocol import Capability
from ascent.rollout.serve_args import ADMIN_TOKEN_ENV, API_KEY_ENV, SERVE_KNOBS
from ascent.rollout.server_process import SERVED_NAME, ServerProcess, free_port


class ServeBackend(PolicyServers):
    """``ascent serve`` servers at ``urls`` serving ``model``; see the module docstring."""

    name = "ascent serve backend"
    capabilities = PolicyServers.capabilities | {Capability.TOKEN_WEIGHT_VERSIONS}

    @classmethod
    def refuses_model(cls, model_type: str) -> str | None:
        return native_refusal(model_type)  # the server runs the native engine

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        for url in self.urls:  # a server given by URL may have loaded weights before
            self._call_it_version_0(url)

    def _call_it_version_0(self, url: str) -> None:
        try:
            response = httpx.post(
                f"{url}/update_weight_version",
                json={"new_version": 0},
                headers=self.admin_headers,
                timeout=self.timeout,
            )
        except httpx.HTTPError as error:
            raise ConnectionError(f"{self.name}: {url} does not answer: {error}") from None
        if response.status_code == 401:
            raise RuntimeError(
                f"{url} refused the admin token: set ${ADMIN_TOKEN_ENV} to the server's (its "
                "--admin-token) where the rollout workers run"
            )
        if response.status_code != 200:
            raise RuntimeError(
                f"{url}/update_weight_version answered {response.status_code}: is it `ascent "
                f"serve`? {response.text[:500]}"
            )

    def _token_versions(self, index: int, choice: dict, started: int) -> list[int]:
        versions = choice.get("weight_versions")
        if versions is None or len(versions) != len(choice["token_ids"]):
            raise RuntimeError(
                f"{self.urls[index]} returned no per-token weight_versions: "
                "rollout.engine=serve needs an `ascent serve` server"
            )
        return versions

    async def _load(self, path: str, indices: Iterable[int], version: int) -> None:
        for index in indices:
            await self._post(index, "/update_weights", {"path": str(path), "version": version})


def serve_command(
    settings: EngineSettings,
    port: int,
    *,
    device: torch.device,
    seed: int,
    request_timeout_s: float,
) -> list[str]:
    """The ``ascent serve`` command line of a rollout server (this interpreter: the server
    runs the same ascent as the trainer); the engine's flags are ``SERVE_KNOBS``'."""
    command = [sys.executable, "-m", "ascent", "serve", *SERVE_KNOBS.args(settings)]
    command += ["--port", str(port), "--served-model-name", SERVED_NAME, "--device", str(device)]
    command += ["--seed", str(seed), "--request-timeout", str(request_timeout_s)]
    return command


def start_serve_backend(
    config: GenerationConfig, tokenizer: object, rank: int, device: torch.device, weights_root: str
) -> ServeBackend:
    """Rollout rank ``rank``'s server: ``rollout.server.urls[rank mod n]`` if listed, else an
    ``ascent serve`` process started here on ``device`` (restarted if it dies)."""
    server = config.server
    common = {
        "tokenizer": tokenizer,
        "request_timeout_s": server.request_timeout_s,
        "weights_root": weights_root,
    }
    if server.urls:
        url = server.urls[rank % len(server.urls)]
        return ServeBackend(
            [url],
            server.model or SERVED_NAME,
            headers=bearer(os.environ.get(API_KEY_ENV)),
            admin_token=os.environ.get(ADMIN_TOKEN_ENV),
            **common,
        )
    port = free_port()
    command = serve_command(
        config,
        port,
        device=device,
        seed=config.sampling.seed or 0,
        request_timeout_s=server.request_timeout_s,
    )
    log = Path(tempfile.gettempdir()) / "ascent-serve-logs" / f"{os.getpid()}-rank{rank}.log"
    token = secrets.token_urlsafe(32)
    keys = {ADMIN_TOKEN_ENV: token, API_KEY_ENV: ""}  # "": not the key this process may hold
    process = ServerProcess(command, port, log, env=keys).start(server.startup_timeout_s)
    return ServeBackend(
        [process.url],
        SERVED_NAME,
        processes=[process],
        admin_token=token,
        startup_timeout_s=server.startup_timeout_s,
        **common,
    )
