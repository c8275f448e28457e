"""A generation server in a child process (``ascent serve``, vLLM): start it, wait until it
answers ``/health``, notice when it dies, stop it. Its output goes to a log file whose tail
every error quotes, so a crash says why."""

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

# The model name a server the rollout role starts serves under (``--served-model-name``),
# and the name its requests send.
SERVED_NAME = "policy"


def _die_with_parent() -> None:
    """In the child before exec: on Linux, get SIGTERM when the parent dies (a killed worker
    must not leave a server holding memory and a port). Linux ties this to the thread that
    started the child: start servers from a thread that lives as long as they should."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerDied(RuntimeError):
    """The server process exited or stopped answering; the message ends with its log tail."""


class ServerProcess:
    """``command`` (argv) that serves HTTP on ``port`` of this machine."""

    def __init__(self, command: list[str], port: int, log: str | Path, env: dict | None = None):
        self.command, self.port, self.log = command, port, Path(log)
        self.env = {**os.environ, **(env or {})}
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None
        self._group: int | None = None  # the process group of the last start, until stopped
        self.starts = 0

    def start(self, timeout: float) -> "ServerProcess":
        """Start (or restart) the process and wait for ``/health``; raise ServerDied if it
        exits or does not answer within ``timeout`` seconds."""
        self.stop()  # a restart: what is left of the last process group goes first
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as handle:
            handle.write(f"--- start {self.starts + 1}: {' '.join(self.command)}\n")
            handle.flush()
            self.process = subprocess.Popen(
                self.command,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env=self.env,
                preexec_fn=_die_with_parent,
                # Its own process group, so that stop() reaches the helpers it starts too
                # (vLLM's engine core, workers and multiprocessing resource tracker).
                start_new_session=True,
            )
        self._group = self.process.pid  # a new session: the group id is the leader's pid
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ServerDied(self.report(f"exited with code {self.process.returncode}"))
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise ServerDied(self.report(f"did not answer /health within {timeout:.0f}s"))

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def report(self, what: str) -> str:
        return f"the server at {self.url} {what}; the last lines of {self.log}:\n{self.log_tail()}"

    def log_tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return "(no log)"
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after 30 s; then SIGKILL to
        whatever of the group is left (a resource tracker ignores SIGTERM and outlives its
        parent)."""
        if self.process is None or self._group is None:
            return
        group, self._group = self._group, None
        _signal_group(group, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        _signal_group(group, signal.SIGKILL)


def _signal_group(group: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(group, signum)
