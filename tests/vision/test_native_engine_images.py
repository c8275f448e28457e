"""The native engine with images (a tiny Qwen2.5-VL): greedy outputs equal to transformers'
``generate`` token for token, through continuous batching and preemption; prompts that
differ only in their images never share cached blocks; sampled log-probs equal to the
trainer's on the same rows; text scored as any model's."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.vision.processing import VisionProcessor
from ascent.workers import ActorWorker
from ascent.workers.rollout_samples import SampleRollouts, prompt_ids
from tests.vision.data import vision_rl_batch
from tests.workers.conftest import in_process
from tests.workers.test_actor import config

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)
PER_BLOCK = 2 * 2 * 1 * 16 * 32 * 4  # layers x (k, v) x kv heads x block x head dim x fp32


def transformers_greedy(model, processor, prompt, images, max_new_tokens):
    ids = torch.tensor([prompt])
    extra = {}
    if images:
        inputs = processor(images)
        extra = {
            "pixel_values": inputs.pixel_values,
            "image_grid_thw": inputs.grid_thw,
            "mm_token_type_ids": (ids == model.config.image_token_id).int(),
        }
    model.model.rope_deltas = None  # cached by the model between calls
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
        **extra,
    )
    return out[0, ids.shape[1] :].tolist()


@pytest.fixture(scope="module")
def rows(tiny_vlm):
    batch = vision_rl_batch(tiny_vlm, rows=6, seed=1)
    return prompt_ids(batch), batch["images"]


@pytest.fixture(scope="module")
def expected(tiny_vlm, rows):
    model = load_causal_lm(tiny_vlm).eval()
    processor = VisionProcessor(tiny_vlm)
    prompts, images = rows
    return [
        transformers_greedy(model, processor, p, i, 12)
        for p, i in zip(prompts, images, strict=True)
    ]


@pytest.mark.parametrize("seats", [2, 16])
def test_greedy_with_images_equals_transformers(tiny_vlm, rows, expected, seats):
    prompts, images = rows
    engine = NativeEngine(
        load_causal_lm(tiny_vlm),
        EngineLimits(max_num_seqs=seats, max_model_len=128),
        model_dir=tiny_vlm,
    )
    samples = engine.generate(prompts, GREEDY, images)
    assert [s.token_ids for s in samples] == expected


def test_preempted_image_sequences_resume_exactly(tiny_vlm, rows):
    """Preempted, a sequence is prefilled again from its prompt and its tokens so far: the
    images' features again, and the generated tokens at their shifted rotary positions."""
    prompts, images = rows
    model = load_causal_lm(tiny_vlm)
    longer = SamplingParams(temperature=0, max_new_tokens=40)
    roomy = NativeEngine(model, EngineLimits(max_num_seqs=6, max_model_len=96), model_dir=tiny_vlm)
    tight = NativeEngine(
        model,
        EngineLimits(max_num_seqs=6, max_model_len=96, kv_cache_bytes=9 * PER_BLOCK),
        model_dir=tiny_vlm,
    )
    expected = [s.token_ids for s in roomy.generate(prompts, longer, images)]
    assert [s.token_ids for s in tight.generate(prompts, longer, images)] == expected
    assert tight.scheduler.preemptions > 0


def test_the_prefix_cache_tells_images_apart(tiny_vlm, rows, expected):
    """The same tokens with other images: computed afresh (their image tokens are the same
    ids); with the same images: taken from the cache."""
    prompts, images = rows
    other = vision_rl_batch(tiny_vlm, rows=1, seed=9)
    assert prompt_ids(other)[0] == prompts[0] and other["images"][0] != images[0]
    engine = NativeEngine(
        load_causal_lm(tiny_vlm),
        EngineLimits(
            max_num_seqs=4, max_model_len=128, kv_cache_bytes=64 * PER_BLOCK
        ),  # room for both: nothing evicted
        model_dir=tiny_vlm,
    )
    first = engine.generate([prompts[0]], GREEDY, [images[0]])[0].token_ids
    reused = engine.scheduler.admission.reused_tokens
    swapped = engine.generate([prompts[0]], GREEDY, [other["images"][0]])[0].token_ids
    assert engine.scheduler.admission.reused_tokens == reused  # nothing shared
    again = engine.generate([prompts[0]], GREEDY, [images[0]])[0].token_ids
    assert engine.scheduler.admission.reused_tokens > reused
    assert first == again == expected[0] and swapped != first


def test_a_text_model_refuses_images_and_counts_must_match(tiny_vlm, tiny_model, rows):
    prompts, images = rows
    text = NativeEngine(load_causal_lm(tiny_model), EngineLimits(max_model_len=128))
    with pytest.raises(ValueError, match=r"prompt 0 has images but .* not a vision-language"):
        text.generate([[1, 2, 3]], GREEDY, [images[0]])
    engine = NativeEngine(
        load_causal_lm(tiny_vlm), EngineLimits(max_model_len=128), model_dir=tiny_vlm
    )
    with pytest.raises(
        ValueError, match=r"prompt 0 has \d+ image tokens but its 2 image\(s\) take \d+"
    ):
        engine.generate([prompts[0]], GREEDY, [images[1]])


def test_sampled_log_probs_match_the_trainer(tiny_vlm, rows):
    """The training/rollout mismatch on image rows stays within the text models' tolerance."""
    prompts, images = rows
    batch = vision_rl_batch(tiny_vlm, rows=6, seed=1).select(
        "prompts", "prompt_mask", "images", "uid"
    )
    engine = NativeEngine(
        load_causal_lm(tiny_vlm),
        EngineLimits(max_num_seqs=8, max_model_len=128),
        model_dir=tiny_vlm,
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=10, n=2, seed=3)
    samples = engine.generate(prompts, params, images)
    rollouts = SampleRollouts(None, pad_id=0, weight_version=lambda: 0).collect(
        batch, samples, params
    )
    with in_process(ActorWorker, config(tiny_vlm)) as actor:
        trained = actor.log_probs(rollouts)["old_log_probs"]
    mask = rollouts["response_mask"].bool()
    difference = (trained - rollouts["rollout_log_probs"])[mask].abs().max()
    assert difference < 1e-4


def test_a_vision_language_model_scores_text_and_refuses_image_tokens_without_images(
    tiny_vlm, rows
):
    """Echo scoring (``ascent serve``) takes a VLM's text as any model's: teacher-forced
    log-probs equal a transformers forward's; ids holding image tokens but no images are
    refused, naming them, rather than scored as text."""
    model = load_causal_lm(tiny_vlm).eval()
    engine = NativeEngine(
        load_causal_lm(tiny_vlm), EngineLimits(max_model_len=256), model_dir=tiny_vlm
    )
    ids = [5, 17, 33, 70, 71, 80, 90, 100, 3, 9]
    with torch.no_grad():
        expected = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    scores = engine.score(ids, top_k=0)
    for position in range(1, len(ids)):
        want = float(expected[position - 1, ids[position]])
        assert scores.log_probs[position] == pytest.approx(want, abs=1e-4)
    prompts, _ = rows
    with pytest.raises(ValueError, match=r"the scored text has \d+ image tokens but its 0 image"):
        engine.score(prompts[0], top_k=0)
