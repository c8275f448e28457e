"""A server's helper processes go with it: stopping the server, or restarting one that died,
ends every process it started, including one that ignores SIGTERM (as vLLM's
multiprocessing resource tracker does) and one orphaned when the server was killed."""

import os
import signal
import sys
import time
from pathlib import Path

from ascent.rollout.server_process import ServerProcess, free_port

# Starts a helper that ignores SIGTERM and sleeps, records its pid, then answers /health.
SERVER = """
import http.server, os, signal, subprocess, sys, time
helper = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
with open(sys.argv[2], "a") as out:
    out.write(f"{helper.pid}\\n")
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie may wait for a container's init to reap)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not running(pid):
            return True
        time.sleep(0.05)
    return False


def test_stop_and_restart_end_every_process_the_server_started(tmp_path):
    pids = tmp_path / "helpers"
    port = free_port()
    command = [sys.executable, "-c", SERVER, str(port), str(pids)]
    server = ServerProcess(command, port, tmp_path / "server.log").start(timeout=30)
    try:
        first = int(pids.read_text().split()[0])
        assert running(first)
        # The server dies without cleaning up (a crash): its helper is orphaned, still running.
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait()
        time.sleep(0.2)
        assert running(first)
        server.start(timeout=30)  # the restart ends what the dead server left
        assert gone(first)
        second = int(pids.read_text().split()[1])
        assert running(second)
    finally:
        server.stop()
    assert gone(second)  # ignored SIGTERM, so SIGKILL after the server exited
    assert not server.alive()
