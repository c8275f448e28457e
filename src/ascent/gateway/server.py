"""The gateway's HTTP server: uvicorn on a free loopback port, in a thread of its own, so the
agents it serves may run in the caller's event loop (async clients) or in threads (sync
clients) without waiting on each other. The agents run in the same process as the rollout
role that starts it, so loopback is enough: the gateway is never reachable from outside."""

import socket
import threading
import time

from ascent.gateway.app import build_gateway_app
from ascent.gateway.sessions import Session, Sessions
from ascent.rollout.native_backend import NativeBackend

START_TIMEOUT_S = 60.0  # a loaded machine can be slow to bring uvicorn up; only a hang guard


class Gateway:
    """Serves ``backend`` to the live ``sessions`` at ``http://127.0.0.1:{port}``; ``close``
    stops it (in-flight calls are cut: their episodes are over by then).

    What an episode recorded lives in its session, and a finished episode's record is its
    caller's: a server that stops (``ensure_running`` starts another, on a new port, over the
    same sessions) loses no finished episode; an episode in flight then sees its calls fail
    and ends as ``error``, keeping the calls it made."""

    host = "127.0.0.1"

    def __init__(self, backend: NativeBackend, request_timeout_s: float | None = 600.0) -> None:
        self.sessions = Sessions(backend.tokenizer)
        self.app = build_gateway_app(backend, self.sessions, request_timeout_s=request_timeout_s)
        self.restarts = 0
        self._serve()

    def ensure_running(self) -> None:
        """Start a new server if this one has stopped (it crashed, or was closed)."""
        if not self.thread.is_alive():
            self.restarts += 1
            self._serve()

    def _serve(self) -> None:
        import uvicorn

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((self.host, 0))  # a free port, chosen by the kernel: no race for one
        self.port = listener.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [listener]}, name="gateway", daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway's HTTP server did not start")
            time.sleep(0.01)

    def base_url(self, session: Session) -> str:
        """The OpenAI ``base_url`` of ``session``: what its agent is given."""
        return f"http://{self.host}:{self.port}/s/{session.id}/v1"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=START_TIMEOUT_S)
