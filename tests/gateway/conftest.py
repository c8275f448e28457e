"""The gateway over the tiny model's native engine, shared by a module's tests."""

import pytest

from ascent.gateway.server import Gateway
from ascent.models import load_causal_lm, load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine
from ascent.rollout.native_backend import NativeBackend


def make_gateway(model_dir: str) -> Gateway:
    engine = NativeEngine(
        load_causal_lm(model_dir),
        EngineLimits(max_num_seqs=8, max_model_len=2048),
        tokenizer=load_tokenizer(model_dir),
    )
    return Gateway(NativeBackend(engine, load_tokenizer(model_dir)))


@pytest.fixture(scope="module")
def gateway(tiny_model):
    gateway = make_gateway(tiny_model)
    yield gateway
    gateway.close()
