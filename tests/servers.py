"""The servers tests start for real, each in its own process: ``ascent serve`` and vLLM's CPU
build (``make vllm-venv``), float32 with a small KV cache so they fit beside the suite."""

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ascent.rollout.engine_settings import EngineSettings
from ascent.rollout.server_process import SERVED_NAME, ServerProcess, free_port
from ascent.rollout.vllm_backend import VLLMBackend
from ascent.rollout.vllm_server import start_vllm_servers


@contextmanager
def ascent_serve(
    model_dir, log: Path, *flags: str, timeout: float = 120, env: dict | None = None
) -> Iterator:
    """``ascent serve MODEL_DIR --port P *flags`` (with ``env`` added to this environment), up
    until the block ends; its output in ``log`` (named in the error if it does not come up)."""
    port = free_port()
    command = [sys.executable, "-m", "ascent", "serve", str(model_dir), "--port", str(port)]
    server = ServerProcess([*command, *flags], port, log, env)
    server.start(timeout)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def ascent_service(
    model_dir, log: Path, *flags: str, overrides: tuple[str, ...] = (), timeout: float = 120
) -> Iterator:
    """``ascent service MODEL_DIR *overrides --port P *flags`` (the Tinker API), up until
    the block ends; its output in ``log``."""
    port = free_port()
    command = [sys.executable, "-m", "ascent", "service", str(model_dir), *overrides]
    command += ["--port", str(port)]
    server = ServerProcess([*command, *flags], port, log, {"TINKER_TELEMETRY": "0"})
    server.start(timeout)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def vllm_server(
    model_dir,
    logs: Path,
    python: str,
    max_num_seqs: int,
    timeout: float = 300,
    image_token_id: int | None = None,
) -> Iterator[VLLMBackend]:
    """One vLLM server on ``model_dir`` (256-token context, 64 MiB of KV cache, seed 0),
    driven through ascent's vLLM backend; closed when the block ends."""
    settings = EngineSettings(
        model={"path": str(model_dir)},
        max_model_len=256,
        max_num_seqs=max_num_seqs,
        dtype="float32",
        kv_cache_bytes=64 * 2**20,
    )
    [server] = start_vllm_servers(
        1,
        logs,
        timeout,
        python=python,
        settings=settings,
        seed=0,
        cpu=True,
        extra_args=[],
        images=image_token_id is not None,
    )
    backend = VLLMBackend(
        [server.url], SERVED_NAME, processes=[server], image_token_id=image_token_id
    )
    try:
        yield backend
    finally:
        asyncio.run(backend.close())
