"""Qwen2-VL, which shares Qwen2.5-VL's design (M-RoPE, a patch-merging vision tower): the
trainer's log-probs equal transformers', and the native engine's greedy output equals
transformers' ``generate``."""

import torch

from ascent.models import load_causal_lm
from ascent.rollout import EngineLimits, NativeEngine
from ascent.vision.processing import VisionProcessor
from ascent.workers import ActorWorker
from ascent.workers.rollout_samples import prompt_ids
from tests.vision.data import vision_rl_batch
from tests.vision.test_actor_with_images import transformers_log_probs
from tests.vision.test_native_engine_images import GREEDY, transformers_greedy
from tests.workers.conftest import in_process
from tests.workers.test_actor import config


def test_qwen2_vl_log_probs_and_greedy_match_transformers(tiny_qwen2_vl):
    batch = vision_rl_batch(tiny_qwen2_vl, rows=6, seed=1)
    with in_process(ActorWorker, config(tiny_qwen2_vl)) as actor:
        out = actor.log_probs(batch)["old_log_probs"]
    expected = transformers_log_probs(tiny_qwen2_vl, batch)
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(out[mask].double(), expected[mask], atol=2e-5, rtol=0)

    model = load_causal_lm(tiny_qwen2_vl).eval()
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    processor = VisionProcessor(tiny_qwen2_vl)
    prompts, images = prompt_ids(batch), batch["images"]
    engine = NativeEngine(
        load_causal_lm(tiny_qwen2_vl), EngineLimits(max_model_len=128), model_dir=tiny_qwen2_vl
    )
    samples = engine.generate(prompts, GREEDY, images)
    for sample, prompt, urls in zip(samples, prompts, images, strict=True):
        assert sample.token_ids == transformers_greedy(model, processor, prompt, urls, 12)
