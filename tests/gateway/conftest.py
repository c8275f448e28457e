"""The gateway over the tiny model's native engine, shared by a module's tests."""

import pytest

from ascent.gateway.server import Gateway
from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine
from ascent.rollout.native_backend import NativeBackend


@pytest.fixture(scope="module")
def gateway(tiny_model):
    engine = NativeEngine(
        load_causal_lm(tiny_model),
        EngineLimits(max_num_seqs=8, max_model_len=2048),
        tokenizer=load_tokenizer(tiny_model),
    )
    gateway = Gateway(NativeBackend(engine, load_tokenizer(tiny_model)))
    yield gateway
    gateway.close()
