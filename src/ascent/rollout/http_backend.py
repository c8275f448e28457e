"""Rollout backends over HTTP: servers that follow the policy (``PolicyServers``: vLLM in
``vllm_backend``, ``ascent serve`` in ``serve_backend``), and any OpenAI-compatible endpoint as
a frozen model.

Token in, token out: a prompt goes as token ids to ``/v1/completions`` with
``return_token_ids`` (vLLM's extension, which ``ascent serve`` also honours) and ``logprobs=0``
(the sampled tokens' log-probs); nothing is re-tokenized. vLLM is started with
``--logprobs-mode processed_logprobs``, so its log-probs are those of the distribution it
sampled from (after temperature, top-k, top-p), as the native engine's are.

Failures: every request has a timeout. A managed server that died is restarted (once per
failure, under a lock, so many failing requests restart it once), given the latest weights,
and the request retried; one that cannot be restarted raises ``ServerDied`` with its log tail.
"""

import asyncio
import itertools
import shutil
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx
from torch import Tensor

from ascent.rollout.protocol import (
    Capability,
    PauseMode,
    RolloutBackend,
    TokenOut,
    refuse_images,
)
from ascent.rollout.server_process import ServerDied, ServerProcess
from ascent.rollout.types import SamplingParams
from ascent.rollout.weight_files import write_weights


def bearer(token: str | None) -> dict:
    """The headers that carry ``token`` (an API key, an admin token); none without one."""
    return {"Authorization": f"Bearer {token}"} if token else {}


class HTTPBackend(RolloutBackend):
    """``urls``: one or more OpenAI-compatible servers (``http://host:port``) serving
    ``model``. Requests spread round-robin; a ``session_id`` always goes to the same server
    (its prefix cache holds the conversation)."""

    name = "OpenAI-compatible endpoint"
    capabilities = frozenset({Capability.HEALTH, Capability.REQUEST_LEVEL})
    # Servers we run stop at exactly sampling.stop_token_ids, as the native engine does; a
    # foreign endpoint keeps its own EOS handling (it may not know ignore_eos).
    stops_as_given = False

    def __init__(
        self,
        urls: Sequence[str],
        model: str,
        *,
        tokenizer: object | None = None,
        request_timeout_s: float = 600.0,
        headers: dict | None = None,
        processes: Sequence[ServerProcess] = (),
        startup_timeout_s: float = 300.0,
    ) -> None:
        if not urls:
            raise ValueError("an HTTP rollout backend needs at least one server URL")
        self.urls = [u.rstrip("/") for u in urls]
        self.model, self.tokenizer = model, tokenizer
        self.timeout = httpx.Timeout(request_timeout_s, connect=10.0)
        self.headers = headers or {}
        self.processes = list(processes)  # servers this backend started (restartable)
        self.startup_timeout_s = startup_timeout_s  # for a restart
        self.version = 0  # a frozen endpoint's weights never change
        self._next = itertools.count()
        self._pool: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None
        self._restart_lock: asyncio.Lock | None = None

    def _client(self) -> httpx.AsyncClient:
        """The connection pool of the running event loop. Synchronous callers run a loop per
        call (``asyncio.run``); a pool cannot outlive its loop, so a new loop gets a new pool
        (the old one's sockets closed with its loop)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool[0] is not loop or self._pool[1].is_closed:
            self._pool = (loop, httpx.AsyncClient(timeout=self.timeout, headers=self.headers))
        return self._pool[1]

    async def refresh_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        version: int,
        *,
        alias: bool = False,
    ) -> int:
        raise RuntimeError(
            "rollout.engine=openai is a frozen endpoint: it cannot follow the trained policy. "
            "Use it for validation, a judge or a teacher; train with engine native, serve or "
            "vllm"
        )

    async def release_connections(self) -> None:
        """Close this event loop's connection pool (before a synchronous caller's loop ends)."""
        if self._pool is not None and self._pool[0] is asyncio.get_running_loop():
            await self._pool[1].aclose()
        self._pool = None

    def _pick(self, session_id: str | None) -> int:
        if session_id is not None:
            return zlib.crc32(session_id.encode()) % len(self.urls)
        return next(self._next) % len(self.urls)

    # -- data plane ---------------------------------------------------------------------------

    def _body(self, prompt_ids: list[int], sampling: SamplingParams) -> dict:
        body = {
            "model": self.model,
            "prompt": list(prompt_ids),
            "n": sampling.n,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "include_stop_str_in_output": True,  # the trace keeps every sampled token
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k
        if sampling.stop:
            body["stop"] = sampling.stop
        if sampling.stop_token_ids:
            body["stop_token_ids"] = sampling.stop_token_ids
        if self.stops_as_given:
            body["ignore_eos"] = True  # EOS stops only when listed (rollout.stop_at_eos)
        return body

    async def generate_n(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        session_id: str | None = None,
        images: list[str] | None = None,
    ) -> list[TokenOut]:
        refuse_images(self, images)
        index = self._pick(session_id)
        started = self._version()  # a server names no per-token versions: see VLLMBackend
        answer = await self._send(index, "/v1/completions", self._body(prompt_ids, sampling))
        outs = []
        for choice in sorted(answer["choices"], key=lambda c: c["index"]):
            ids = choice["token_ids"]
            log_probs = (choice.get("logprobs") or {}).get("token_logprobs") or []
            versions = self._token_versions(index, choice, started)
            outs.append(TokenOut(ids, log_probs, choice["finish_reason"], versions))
        return outs

    async def _send(self, index: int, route: str, body: dict) -> dict:
        """POST ``body`` to server ``index``'s generation ``route``; its JSON answer. A server
        this backend started that died is restarted and asked once more."""
        for attempt in range(2):
            try:
                response = await self._client().post(f"{self.urls[index]}{route}", json=body)
                break
            except httpx.TimeoutException:
                raise TimeoutError(self._describe(index, "timed out")) from None
            except httpx.TransportError:
                if attempt == 1 or not await self._restart(index):
                    raise ServerDied(self._describe(index, "is unreachable")) from None
        if response.status_code != 200:
            raise RuntimeError(f"{self.urls[index]} refused a request: {response.text[:2000]}")
        return response.json()

    def _version(self) -> int:
        return 0

    def _token_versions(self, index: int, choice: dict, started: int) -> list[int]:
        """The weight version of each token of ``choice`` (server ``index``): a server that
        names none gets the version current when the request was sent, for every token."""
        return [started] * len(choice["token_ids"])

    def _describe(self, index: int, what: str) -> str:
        process = self._process(index)
        if process is not None:
            return process.report(what)
        return f"the server at {self.urls[index]} {what}"

    def _process(self, index: int) -> ServerProcess | None:
        return self.processes[index] if index < len(self.processes) else None

    async def _restart(self, index: int) -> bool:
        """Restart server ``index`` if this backend started it and it died; True if it is
        serving again."""
        process = self._process(index)
        if process is None:
            return False
        if self._restart_lock is None:
            self._restart_lock = asyncio.Lock()
        async with self._restart_lock:
            if process.alive():
                return True  # another request restarted it meanwhile
            print(process.report("died; restarting it"), flush=True)
            # On this thread, not a pool's: the server is tied to the thread that starts it
            # (PR_SET_PDEATHSIG fires when that thread ends, and asyncio.to_thread's end with
            # their loop). Blocking the loop meanwhile costs nothing: requests wait for it.
            process.start(self.startup_timeout_s)
            await self._after_restart(index)
            return True

    async def _after_restart(self, index: int) -> None:
        """A restarted server has its initial weights; subclasses give it the latest."""

    # -- control plane --------------------------------------------------------------------------

    async def health(self) -> dict:
        client = self._client()
        states = {}
        for url in self.urls:
            try:
                states[url] = (await client.get(f"{url}/health")).status_code == 200
            except httpx.HTTPError:
                states[url] = False
        return {"status": "ok" if all(states.values()) else "degraded", "servers": states}

    async def close(self) -> None:
        await self.release_connections()
        for process in self.processes:
            process.stop()
        if isinstance(getattr(self, "weights_dir", None), Path):
            shutil.rmtree(self.weights_dir, ignore_errors=True)


class PolicyServers(HTTPBackend):
    """Servers that follow the trained policy: each refresh is a safetensors directory
    (written under ``weights_dir`` by the rollout worker) that every server reloads from
    (``_load``) and stamps with the version the refresh carries (``version``: the latest). A
    restarted server gets the latest directory and version again. ``pause``/``resume`` are
    the servers' own (``POST /pause?mode=``, ``/resume``: vLLM's dev mode and ``ascent
    serve`` agree)."""

    capabilities = frozenset(
        {
            Capability.PAUSE,
            Capability.UPDATE_WEIGHTS_FROM_DISK,
            Capability.WEIGHT_VERSION,
            Capability.HEALTH,
            Capability.REFRESH_WEIGHTS,
            Capability.REQUEST_LEVEL,
        }
    )

    stops_as_given = True

    def __init__(
        self,
        *args: object,
        weights_root: str | None = None,
        admin_token: str | None = None,
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.admin_headers = bearer(admin_token)  # on control calls; ``headers`` on the rest
        self.weights_path: str | None = None
        # Where the rollout worker writes each refresh (replaced in place every step).
        if weights_root is not None:
            Path(weights_root).mkdir(parents=True, exist_ok=True)
        self.weights_dir = Path(tempfile.mkdtemp(prefix="ascent-weights-", dir=weights_root))

    def _version(self) -> int:
        return self.version

    async def pause(self, mode: PauseMode = "abort") -> None:
        await self._admin("POST", "/pause", params={"mode": mode})

    async def resume(self) -> None:
        await self._admin("POST", "/resume")

    async def update_weights_from_disk(self, path: str, version: int) -> int:
        await self._load(path, range(len(self.urls)), version)
        self.weights_path, self.version = path, version
        return version

    async def refresh_weights(
        self,
        named_tensors: Iterable[tuple[str, Tensor]],
        version: int,
        *,
        alias: bool = False,
    ) -> int:
        """Write the weights under ``weights_dir`` (replacing the last refresh's) and have every
        server reload them, its requests held where they are meanwhile (pause "keep", reload,
        resume): responses in flight go on under the new weights."""
        directory = write_weights(self.weights_dir, named_tensors)
        await self.pause("keep")
        try:
            return await self.update_weights_from_disk(str(directory), version)
        finally:
            await self.resume()

    async def _load(self, path: str, indices: Iterable[int], version: int) -> None:
        """Servers ``indices`` reload from ``path``, after which they hold ``version``."""
        raise NotImplementedError

    async def _admin(self, method: str, path: str, **kwargs: object) -> list[httpx.Response]:
        """The same admin call on every server; raises naming the server that refused."""
        client = self._client()
        responses = await asyncio.gather(
            *(
                client.request(method, f"{url}{path}", headers=self.admin_headers, **kwargs)
                for url in self.urls
            )
        )
        for url, response in zip(self.urls, responses, strict=True):
            if response.status_code >= 400:
                raise RuntimeError(f"{url}{path} answered {response.status_code}: {response.text}")
        return responses

    async def _post(self, index: int, route: str, body: dict | None = None) -> httpx.Response:
        """An admin POST to server ``index``; raises naming the server if it refuses."""
        url = self.urls[index]
        response = await self._client().post(f"{url}{route}", json=body, headers=self.admin_headers)
        if response.status_code >= 400:
            raise RuntimeError(
                f"{url}{route} answered {response.status_code}: {response.text[:2000]}"
            )
        return response

    async def weight_version(self) -> int:
        return self.version

    async def _after_restart(self, index: int) -> None:
        if self.weights_path is not None:
            await self._load(self.weights_path, [index], self.version)
