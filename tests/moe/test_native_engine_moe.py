"""The native engine on a mixture-of-experts model (a tiny Qwen3-MoE): its batched expert
dispatch equals transformers' sparse block, its greedy output equals transformers'
``generate`` token for token (Qwen2-MoE's shared expert too), and its sampled log-probs
equal the trainer's."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.models.families.feed_forward import Experts, GatedMLP, SharedExperts
from ascent.models.families.qwen_moe import feed_forward
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from tests.families.test_exactness import assert_sampled_log_probs_equal_the_trainers
from tests.rollout.test_native_engine import hf_greedy

GREEDY = SamplingParams(temperature=0, max_new_tokens=16)
PROMPTS = [[5, 17, 33, 70, 71, 80, 90, 100], [100, 3, 9], list(range(40, 75)), [7] * 20]


def test_expert_dispatch_equals_the_transformers_block(tiny_moe):
    model = load_causal_lm(tiny_moe).eval()
    kinds = [type(feed_forward(layer, model.config)) for layer in model.model.layers]
    assert kinds == [Experts, GatedMLP, Experts]
    x = torch.randn(3, 11, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    for index in (0, 2):
        block, ours = (
            model.model.layers[index].mlp,
            feed_forward(model.model.layers[index], model.config),
        )
        with torch.no_grad():
            torch.testing.assert_close(ours(x), block(x), atol=1e-6, rtol=0)
        weights, experts = ours.route(x.reshape(-1, x.shape[-1]))
        assert experts.unique().numel() == 4  # every expert gets tokens: dispatch is tested
        torch.testing.assert_close(weights.sum(-1), torch.ones(33))


def test_a_shared_expert_block_equals_the_transformers_block(tiny_qwen2_moe):
    """Qwen2-MoE: routed experts plus a shared expert behind a sigmoid gate."""
    model = load_causal_lm(tiny_qwen2_moe).eval()
    x = torch.randn(2, 9, model.config.hidden_size, generator=torch.Generator().manual_seed(1))
    for layer in model.model.layers:
        block = feed_forward(layer, model.config)
        assert isinstance(block, SharedExperts)
        with torch.no_grad():
            torch.testing.assert_close(block(x), layer.mlp(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    ("fixture", "seats"), [("tiny_moe", 2), ("tiny_moe", 16), ("tiny_qwen2_moe", 4)]
)
def test_greedy_equals_transformers(request, fixture, seats):
    model = load_causal_lm(request.getfixturevalue(fixture)).eval()
    expected = [hf_greedy(model, prompt, 16) for prompt in PROMPTS]
    engine = NativeEngine(model, EngineLimits(max_num_seqs=seats, max_model_len=128))
    assert [s.token_ids for s in engine.generate(PROMPTS, GREEDY)] == expected


def test_sampled_log_probs_match_the_trainer(tiny_moe):
    assert_sampled_log_probs_equal_the_trainers(tiny_moe)
