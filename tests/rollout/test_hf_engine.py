"""The transformers reference engine: its log-probs against a forward pass over the generated
sequences, and generation that holds one step's scores, not every step's."""

import os
import subprocess
import sys

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.rollout import SamplingParams, TransformersEngine
from tests.rollout.test_native_engine import random_prompts, reference_distribution


def forward_log_probs(model, prompt, tokens, temperature, top_k, top_p):
    """log p(token) for each generated token, from one forward pass over prompt + tokens."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    if temperature == 0:
        return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]
    return torch.stack(
        [
            reference_distribution(row, temperature, top_k, top_p)[token].log()
            for row, token in zip(logits, tokens, strict=True)
        ]
    )


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(0, 0, 1.0), (0.7, 0, 1.0), (1.0, 0, 1.0), (0.8, 40, 0.9)]
)
def test_log_probs_are_those_of_the_sampled_distribution(tiny_model, temperature, top_k, top_p):
    """Rows stop early on a stop token (padded after), and generate stops once all have."""
    model = load_causal_lm(tiny_model)
    # Sharpen the random model's nearly uniform output, so the top-k / top-p cuts matter.
    model.lm_head.weight.data *= 5
    prompts = random_prompts([3, 11, 5, 8])
    engine = TransformersEngine(model, max_num_seqs=3)
    params = SamplingParams(
        n=2, temperature=temperature, top_k=top_k, top_p=top_p, max_new_tokens=10, seed=5
    )
    free = engine.generate(prompts, params)
    stop = free[0].token_ids[3]
    samples = engine.generate(prompts, params.model_copy(update={"stop_token_ids": [stop]}))
    assert any(s.finish_reason == "stop" and len(s.token_ids) < 10 for s in samples)
    for sample in free + samples:
        expected = forward_log_probs(
            model, prompts[sample.prompt_index], sample.token_ids, temperature, top_k, top_p
        )
        assert torch.isfinite(expected).all(), "a token outside the top-k/top-p set was drawn"
        got = torch.tensor(sample.log_probs, dtype=torch.float64)
        assert got.shape == expected.shape
        assert (got - expected).abs().max() < 1e-4


PEAK_MEMORY = """
import sys

from transformers import Qwen2Config

from ascent.models.loading import causal_lm_from_config
from ascent.rollout import SamplingParams, TransformersEngine

vocab, rows, steps = (int(a) for a in sys.argv[1:])


def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))


config = Qwen2Config(
    vocab_size=vocab,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=steps + 8,
)
engine = TransformersEngine(causal_lm_from_config(config), max_num_seqs=rows)
engine.generate([[1, 2, 3]], SamplingParams(max_new_tokens=2, seed=0))
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # resets the peak (VmHWM) to the current resident set
before = kib("VmRSS")
samples = engine.generate([[1, 2, 3, 4]], SamplingParams(n=rows, max_new_tokens=steps, seed=0))
assert [len(s.token_ids) for s in samples] == [steps] * rows
print(before, kib("VmHWM"))
"""


@pytest.mark.slow
def test_generation_does_not_keep_every_steps_scores():
    """32 rows x 128 steps over a 32k vocabulary: every step's float32 scores are 512 MiB, and
    stacking them as much again; one step's are 4 MiB. The growth of the peak resident set of
    a child process during generate (~30 MiB when only one step's are kept, ~3x the total when
    all are) must stay far below the total."""
    vocab, rows, steps = 32768, 32, 128
    # glibc raises its mmap threshold after large frees, and then serves the next 4 MiB
    # tensors from a heap that fragments and grows (by up to the total, run to run) without
    # anything being kept; a fixed threshold returns freed tensors to the OS, so the resident
    # set measures what is alive.
    environment = os.environ | {"MALLOC_MMAP_THRESHOLD_": str(2**20)}
    done = subprocess.run(
        [sys.executable, "-c", PEAK_MEMORY, str(vocab), str(rows), str(steps)],
        capture_output=True,
        text=True,
        check=False,
        env=environment,
    )
    assert done.returncode == 0, done.stderr
    before, peak = (int(n) for n in done.stdout.split()[-2:])
    all_scores = rows * steps * vocab * 4
    growth = (peak - before) * 1024
    print(f"peak growth {growth / 2**20:.0f} MiB; every step's scores {all_scores / 2**20:.0f} MiB")
    assert growth < all_scores / 4
