import pytest

from tests.servers import ascent_serve


@pytest.fixture(scope="module")
def served(tiny_model, tmp_path_factory):
    """``ascent serve`` on the tiny model, in its own process."""
    flags = ["--max-model-len", "512", "--max-num-seqs", "16", "--served-model-name", "tiny"]
    with ascent_serve(
        tiny_model, tmp_path_factory.mktemp("serve") / "server.log", *flags
    ) as server:
        yield server
