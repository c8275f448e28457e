"""The native engine generates in float16 (``rollout.dtype: float16``, the generator's half of
float16 RL): weights and KV cache in float16, the log-probs it records close to a float32
forward's. On a CPU its float32-only fast paths (prepacked linears, the C paged-attention
kernel) step aside for the generic ones."""

import torch

from ascent.models import load_causal_lm
from ascent.rollout import NativeEngine, SamplingParams
from ascent.rollout.engine_settings import EngineSettings


def float32_log_probs(model_dir: str, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    model = load_causal_lm(model_dir)
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].double()
    return logits.log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def test_the_native_engine_samples_in_float16(tiny_model):
    settings = EngineSettings(
        model={"path": tiny_model}, dtype="float16", max_num_seqs=4, max_model_len=64
    )
    engine = NativeEngine.load(settings, torch.device("cpu"))
    assert engine.dtype == torch.float16 and engine.cache.dtype == torch.float16
    assert engine.runner.packed is None, "prepacked linears are float32 only"
    prompts = [[5, 17, 3], [9, 2, 44, 7, 1, 8, 30], [100, 12, 6, 250, 3]]
    samples = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=8, seed=0))
    for sample in samples:
        assert len(sample.token_ids) == 8
        expected = float32_log_probs(tiny_model, prompts[sample.prompt_index], sample.token_ids)
        got = torch.tensor(sample.log_probs, dtype=torch.float64)
        # float16 stays within 1e-3 here (~2e-4 measured); bfloat16 misses by ~2e-3.
        torch.testing.assert_close(got, expected, atol=1e-3, rtol=0)
