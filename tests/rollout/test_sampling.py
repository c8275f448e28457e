"""The sampler's two-level inverse CDF draws the token one running total over the whole
vocabulary would draw, for the same uniform: across block boundaries, with a partial last
block, with top-k and top-p masks, and greedy; its log-probs are the sampling distribution's."""

import pytest
import torch

from ascent.rollout.sampling import BLOCK, Scratch, distribution, sample
from ascent.rollout.types import SamplingParams


def one_running_total(logits, params, uniform):
    """The reference: the first token whose float64 cumulative probability exceeds U."""
    cumulative = distribution(logits, params).exp().cumsum(dim=-1, dtype=torch.float64)
    threshold = uniform[:, None] * cumulative[:, -1:]
    return torch.searchsorted(cumulative, threshold, right=True).squeeze(-1)


@pytest.mark.parametrize("vocab", [BLOCK * 3, BLOCK * 3 + 389, 300])
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.6, top_k=7),
        SamplingParams(temperature=1.3, top_p=0.5),
    ],
    ids=["plain", "top_k", "top_p"],
)
def test_the_two_level_draw_is_the_one_level_draw(vocab, params):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn(400, vocab, generator=g) * 4
    # The mass around block boundaries: draws must cross them both ways.
    logits[:, BLOCK - 3 : BLOCK + 3] += 6
    uniform = torch.rand(400, dtype=torch.float64, generator=g)
    tokens, log_probs = sample(logits, params, uniform)
    assert torch.equal(tokens, one_running_total(logits, params, uniform))
    expected = distribution(logits, params).gather(-1, tokens[:, None]).squeeze(-1)
    torch.testing.assert_close(log_probs, expected, atol=1e-5, rtol=0)
    assert torch.isfinite(log_probs).all(), "a masked token was drawn"
    assert len(set((tokens // BLOCK).tolist())) > 1 or vocab < BLOCK


def test_greedy_takes_the_argmax_with_its_log_softmax():
    logits = torch.randn(5, BLOCK * 2 + 7, generator=torch.Generator().manual_seed(1))
    tokens, log_probs = sample(logits, SamplingParams(temperature=0), None)
    assert torch.equal(tokens, logits.argmax(-1))
    expected = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    torch.testing.assert_close(log_probs, expected, atol=1e-6, rtol=0)


def test_a_kept_buffer_draws_what_a_fresh_one_draws_and_is_reused_while_it_fits():
    g = torch.Generator().manual_seed(1)
    scratch = Scratch()
    params = SamplingParams(temperature=0.8, top_k=50)
    for rows, vocab in [(16, BLOCK * 2 + 7), (4, BLOCK * 2 + 7), (32, BLOCK * 3)]:
        logits = torch.randn(rows, vocab, generator=g) * 3
        uniform = torch.rand(rows, dtype=torch.float64, generator=g)
        before = scratch.buffer.data_ptr()
        tokens, log_probs = sample(logits, params, uniform, scratch)
        fresh_tokens, fresh_log_probs = sample(logits, params, uniform)
        assert torch.equal(tokens, fresh_tokens) and torch.equal(log_probs, fresh_log_probs)
        if rows == 4:  # smaller than the 16 rows before it: the same memory
            assert scratch.buffer.data_ptr() == before
        assert scratch.buffer.numel() >= rows * vocab
    scratch.release()
    assert scratch.buffer.numel() == 0
