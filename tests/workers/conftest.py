import pytest

from ascent.controller import ResourcePool, spawn_group
from ascent.models import build_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A Qwen2-shaped model (untied head) and its byte-level tokenizer, saved to disk."""
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def tiny_tied_model(tmp_path_factory):
    """The same shape with the output head tied to the embedding."""
    return str(
        build_tiny_model(tmp_path_factory.mktemp("tied") / "model", tie_word_embeddings=True)
    )


def in_process(worker_class, config):
    """A one-rank group in this process (FSDP2 over a world of one)."""
    return spawn_group(worker_class, ResourcePool(), args=(config,), backend="in-process")
