"""Every model family on CUDA: greedy decoding, eager and replayed from captured CUDA graphs
(where the family allows them), equals transformers' ``generate`` on the same GPU, token for
token, and both give the same sampled log-probs. Run with ``pytest -m gpu``."""

import pytest

from ascent.models import load_causal_lm
from ascent.models.families import family_of
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from tests.families.models import NAMES
from tests.rollout.test_native_engine import hf_greedy, random_prompts

pytestmark = pytest.mark.gpu

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)
PROMPTS = random_prompts([6, 13, 3, 30, 21], seed=4)


@pytest.mark.parametrize("name", NAMES)
def test_graphed_and_eager_decoding_equal_transformers_on_cuda(family_checkpoint, name):
    path = family_checkpoint(name)
    model = load_causal_lm(path).cuda().eval()
    expected = [hf_greedy(model, prompt, 12) for prompt in PROMPTS]

    def engine(graphs: bool) -> NativeEngine:
        limits = EngineLimits(max_num_seqs=3, max_model_len=96, cuda_graphs=graphs)
        return NativeEngine(model, limits, model_dir=path)

    eager, graphed = engine(False), engine(True)
    assert [s.token_ids for s in eager.generate(PROMPTS, GREEDY)] == expected
    assert [s.token_ids for s in graphed.generate(PROMPTS, GREEDY)] == expected
    # MoE steps have per-expert shapes, so families with experts decode eagerly.
    assert graphed.use_cuda_graphs == graphed.runner.graphable
    assert graphed.runner.graphable <= family_of(model).cuda_graphs
    if graphed.use_cuda_graphs:
        assert graphed.graphs is not None and graphed.graphs.graphs, "graphs were captured"

    sampled = SamplingParams(temperature=1.0, max_new_tokens=10, n=2, seed=3)
    a, b = eager.generate(PROMPTS, sampled), graphed.generate(PROMPTS, sampled)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    for x, y in zip(a, b, strict=True):
        assert max(abs(p - q) for p, q in zip(x.log_probs, y.log_probs, strict=True)) < 1e-4
