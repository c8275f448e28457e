"""A CPU engine's products on oneDNN's prepacked weights: equal to ``F.linear`` up to
rounding, packed once per weight, and never stale: after a refresh (copied or aliased) the
engine generates what a fresh engine on the new weights generates, and sleeping frees the
packed copies. Switched off, or in another dtype, the products are ``F.linear``'s."""

import pytest
import torch
import torch.nn.functional as F

from ascent.models import load_causal_lm
from ascent.models.loading import causal_lm_from_config
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.packed_linears import PackedLinears
from tests.rollout.test_native_engine import random_prompts

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)


def test_packed_products_equal_f_linear_and_pack_once():
    g = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(48, 32, generator=g), torch.randn(48, generator=g)
    packed = PackedLinears()
    for x in (torch.randn(5, 32, generator=g), torch.randn(2, 7, 32, generator=g)):
        torch.testing.assert_close(packed(x, weight, bias), F.linear(x, weight, bias))
        torch.testing.assert_close(packed(x, weight), F.linear(x, weight))
    assert len(packed.packed) == 1 and packed.bytes == weight.numel() * 4
    one_row = torch.randn(1, 32, generator=g)  # too few rows to gain: F.linear's own result
    assert torch.equal(packed(one_row, weight), F.linear(one_row, weight))
    x64 = torch.randn(3, 32, dtype=torch.float64)
    assert torch.equal(packed(x64, weight.double()), F.linear(x64, weight.double()))
    packed.clear()
    assert packed.bytes == 0


@pytest.mark.parametrize("alias", [False, True])
def test_a_refresh_is_never_served_from_stale_packed_weights(tiny_model, alias):
    prompts = random_prompts([9, 14], seed=2)
    engine = NativeEngine(load_causal_lm(tiny_model), EngineLimits(max_num_seqs=4))
    assert engine.runner.packed is not None, "packed on this CPU (oneDNN is in torch's build)"
    before = [s.token_ids for s in engine.generate(prompts, GREEDY)]
    assert engine.runner.packed.bytes > 0
    other = causal_lm_from_config(engine.model.config, seed=5)
    engine.load_weights(other.named_parameters(), version=1, alias=alias)
    expected = NativeEngine(other, EngineLimits(max_num_seqs=4)).generate(prompts, GREEDY)
    after = [s.token_ids for s in engine.generate(prompts, GREEDY)]
    assert after == [s.token_ids for s in expected] != before
    engine.sleep()
    assert engine.runner.packed.bytes == 0


def test_switched_off_the_engine_multiplies_with_f_linear(tiny_model, monkeypatch):
    monkeypatch.setenv("ASCENT_CPU_PACKED_LINEARS", "0")
    prompts = random_prompts([9, 14], seed=2)
    plain = NativeEngine(load_causal_lm(tiny_model), EngineLimits(max_num_seqs=4))
    assert plain.runner.packed is None and plain.runner.linear is F.linear
    monkeypatch.delenv("ASCENT_CPU_PACKED_LINEARS")
    packed = NativeEngine(load_causal_lm(tiny_model), EngineLimits(max_num_seqs=4))
    assert [s.token_ids for s in plain.generate(prompts, GREEDY)] == [
        s.token_ids for s in packed.generate(prompts, GREEDY)
    ]
    bf16 = NativeEngine(load_causal_lm(tiny_model, dtype=torch.bfloat16), EngineLimits())
    assert bf16.runner.packed is None
