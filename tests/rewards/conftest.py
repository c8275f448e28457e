"""The reward tests' tokenizer: the tiny model's byte-level one, decoded responses round-trip."""

import pytest

from ascent.models import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)
