"""The native engine on CUDA: decode steps replayed from CUDA graphs equal the eager ones;
bf16 generation; sleep hands the cache memory back. Run with `pytest -m gpu`."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from tests.rollout.test_native_engine import GREEDY, hf_greedy, random_prompts

pytestmark = pytest.mark.gpu


def test_cuda_graph_decoding_equals_eager_and_transformers(tiny_model):
    model = load_causal_lm(tiny_model).cuda()
    prompts = random_prompts([3, 11, 5, 17, 4, 9, 2])
    eager = NativeEngine(model, EngineLimits(max_num_seqs=3, max_model_len=64, cuda_graphs=False))
    graphed = NativeEngine(model, EngineLimits(max_num_seqs=3, max_model_len=64, cuda_graphs=True))
    eager_out = eager.generate(prompts, GREEDY)
    graphed_out = graphed.generate(prompts, GREEDY)
    assert graphed.graphs is not None and graphed.graphs.graphs, "graphs were captured"
    assert [s.token_ids for s in graphed_out] == [s.token_ids for s in eager_out]
    for sample in graphed_out:
        expected = hf_greedy(model, prompts[sample.prompt_index], 12)
        assert sample.token_ids == expected
    for a, b in zip(graphed_out, eager_out, strict=True):
        assert max(abs(x - y) for x, y in zip(a.log_probs, b.log_probs, strict=True)) < 1e-4


def test_bf16_generation_and_sleep_returns_the_cache_memory(tiny_model):
    model = load_causal_lm(tiny_model, dtype=torch.bfloat16).cuda()
    engine = NativeEngine(model, EngineLimits(max_num_seqs=16, max_model_len=256))
    samples = engine.generate(
        random_prompts([8, 20]), SamplingParams(n=8, max_new_tokens=32, seed=0)
    )
    assert len(samples) == 16 and all(len(s.token_ids) == 32 for s in samples)
    awake, held = torch.cuda.memory_allocated(), engine.cache.bytes
    engine.sleep()
    assert awake - torch.cuda.memory_allocated() >= held > 0
    engine.generate(random_prompts([8]), SamplingParams(max_new_tokens=4, seed=0))
    assert engine.cache.awake
