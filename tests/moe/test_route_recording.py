"""The native engine keeps, for a mixture of experts, the experts every position went to (in
the KV cache, beside its keys), and hands them back with each sample: the same routes a
transformers forward over prompt + response takes, for a prompt prefilled once for several
samples, for a prompt found in the prefix cache, across preemption, and for Qwen2-MoE's
shared-expert layers and DeepSeek-V3's grouped routing; a dense model has none."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.moe.routing import RouterTape, routers_of
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams

PROMPTS = [[5, 17, 33, 70, 71, 80, 90, 100], list(range(40, 75))]


def transformers_routes(model, tokens):
    """(T, S, k) the experts transformers routes each of ``tokens`` to, sorted per token."""
    with RouterTape(routers_of(model)) as tape, torch.no_grad():
        model(torch.tensor([tokens]))
    return torch.stack(tape.experts, dim=1).sort(dim=-1).values


def check_routes(model, prompt, sample):
    routes = sample.routed_experts
    context = prompt + sample.token_ids[:-1]  # the last token is never fed back
    assert routes is not None and routes.shape[0] == len(context)
    assert (routes >= 0).all(), "every position has its routes, cached prefix or not"
    expected = transformers_routes(model, context)
    assert torch.equal(routes.long().sort(dim=-1).values, expected)


@pytest.mark.parametrize("fixture", ["tiny_moe", "tiny_qwen2_moe", "tiny_deepseek", "tiny_mixtral"])
def test_samples_carry_the_routes_transformers_takes(request, fixture):
    path = request.getfixturevalue(fixture)
    model = load_causal_lm(path).eval()
    engine = NativeEngine(load_causal_lm(path), EngineLimits(max_num_seqs=4, max_model_len=96))
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=12, seed=0)
    first = engine.generate(PROMPTS, params)
    again = engine.generate(PROMPTS[:1], params)  # its prompt now comes from the prefix cache
    for sample in first + again:
        check_routes(model, PROMPTS[sample.prompt_index], sample)


def test_routes_survive_preemption(tiny_moe):
    """A cache of few blocks preempts sequences; resumed, they are prefilled again."""
    model = load_causal_lm(tiny_moe).eval()
    block_bytes = 2 * 3 * 1 * 32 * 4 * 16  # keys and values, 3 layers x 1 head x 32, float32
    engine = NativeEngine(
        load_causal_lm(tiny_moe),
        EngineLimits(max_num_seqs=4, max_model_len=64, kv_cache_bytes=6 * block_bytes),
    )
    assert engine.cache.block_bytes == block_bytes
    params = SamplingParams(n=4, temperature=1.0, max_new_tokens=24, seed=1)
    samples = engine.generate(PROMPTS[:1], params)
    assert engine.scheduler.preemptions > 0
    for sample in samples:
        check_routes(model, PROMPTS[0], sample)


def test_a_dense_model_has_no_routes(tiny_model):
    engine = NativeEngine(
        load_causal_lm(tiny_model), EngineLimits(max_num_seqs=2, max_model_len=64)
    )
    sample = engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=4, seed=0))[0]
    assert sample.routed_experts is None
