import sys

import pytest

from ascent.rollout.server_process import ServerProcess, free_port


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    """``ascent serve`` on the tiny model, in its own process."""
    port = free_port()
    command = [sys.executable, "-m", "ascent", "serve", tiny_model, "--port", str(port)]
    command += ["--max-model-len", "512", "--max-num-seqs", "16", "--served-model-name", "tiny"]
    server = ServerProcess(command, port, tmp_path_factory.mktemp("serve") / "server.log")
    server.start(timeout=120)
    yield server
    server.stop()
