"""An HTTP client for synchronous callers of an OpenAI-compatible API (the LLM judge, the
distillation teacher's endpoint): an ``httpx.AsyncClient`` on an event loop of its own, on
its own daemon thread, so that many requests run concurrently while the caller (the RL loop,
synchronous) waits for ``run``'s result, and a caller's own running loop is not involved."""

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any

import httpx

from ascent.errors import InputError


def api_key_headers(api_key_env: str | None, field: str, whose: str) -> dict[str, str]:
    """``Authorization: Bearer KEY`` from the environment variable ``api_key_env`` (none
    without one); an unset variable is an error naming the config ``field`` and ``whose``
    key it should hold."""
    if api_key_env is None:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise InputError(
            f"{field}={api_key_env!r}: that environment variable is not set; export {whose} "
            "API key in it, or leave api_key_env out"
        )
    return {"Authorization": f"Bearer {key}"}


class BackgroundClient:
    """``client``: the AsyncClient (``slots`` connections, so the pool never makes a request
    wait); ``run(coroutine)`` runs it on the thread's loop and returns its result; ``close``
    ends the client, the loop and the thread (once; later calls do nothing)."""

    def __init__(self, name: str, slots: int, timeout_s: float, headers: dict[str, str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()
        limits = httpx.Limits(max_connections=slots, max_keepalive_connections=slots)
        self.client = httpx.AsyncClient(timeout=timeout_s, headers=headers, limits=limits)

    def run(self, coroutine: Coroutine) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.run(self.client.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
