"""vLLM's CPU build serving the tiny Qwen2.5-VL with images, through ascent's vLLM backend
(token ids with the images as content parts on ``/inference/v1/generate``): greedy outputs
equal to the native engine's and transformers' token for token, log-probs equal to the
native engine's, weight refresh, and an RL run on image prompts with vLLM generating.
Skipped when no vLLM interpreter exists (``make vllm-venv``; ``make test`` builds it)."""

import asyncio

import pytest

from ascent.models import load_causal_lm
from ascent.models.tiny_vlm import build_tiny_vlm
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.vllm_server import vllm_python
from ascent.rollout.weight_files import write_weights
from ascent.trainer.rl.loop import train_rl
from ascent.vision.processing import VisionProcessor
from ascent.vision.prompts import image_token_id
from ascent.workers.rollout_samples import prompt_ids
from tests.servers import vllm_server
from tests.trainer.rl_setup import metric
from tests.vision.data import vision_rl_batch
from tests.vision.test_native_engine_images import transformers_greedy
from tests.vision.test_rl_with_images import image_run

try:
    PYTHON = vllm_python()
except FileNotFoundError as missing:
    pytest.skip(str(missing), allow_module_level=True)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
GREEDY = SamplingParams(temperature=0, max_new_tokens=12)


@pytest.fixture(scope="module")
def rows(tiny_vlm):
    """Prompts with two, one and no images (and their images as data URLs)."""
    batch = vision_rl_batch(tiny_vlm, rows=6, seed=1)
    return prompt_ids(batch), batch["images"]


@pytest.fixture(scope="module")
def vllm(tiny_vlm, tmp_path_factory):
    token = image_token_id(load_causal_lm(tiny_vlm).config)
    logs = tmp_path_factory.mktemp("vllm-vlm-logs")
    with vllm_server(tiny_vlm, logs, PYTHON, 8, image_token_id=token) as backend:
        yield backend


def native_greedy(model, model_dir, rows):
    engine = NativeEngine(
        model, EngineLimits(max_num_seqs=4, max_model_len=256), model_dir=model_dir
    )
    return engine.generate(rows[0], GREEDY, rows[1])


def test_greedy_with_images_equals_native_and_transformers(tiny_vlm, rows, vllm):
    model = load_causal_lm(tiny_vlm).eval()
    processor = VisionProcessor(tiny_vlm)
    expected = [transformers_greedy(model, processor, p, i, 12) for p, i in zip(*rows, strict=True)]
    native = native_greedy(model, tiny_vlm, rows)
    served = vllm.generate_batch(rows[0], GREEDY, images=rows[1])
    assert [s.token_ids for s in native] == expected
    assert [s.token_ids for s in served] == expected
    for ours, theirs in zip(native, served, strict=True):
        assert theirs.log_probs == pytest.approx(ours.log_probs, abs=1e-4)


def test_weight_refresh_with_images(tiny_vlm, rows, vllm, tmp_path):
    before = vllm.generate_batch(rows[0], GREEDY, images=rows[1])
    other = load_causal_lm(str(build_tiny_vlm(tmp_path / "other", seed=11))).eval()
    new = write_weights(tmp_path / "new", other.named_parameters())
    version = asyncio.run(vllm.update_weights_from_disk(str(new), vllm.version + 1))
    changed = vllm.generate_batch(rows[0], GREEDY, images=rows[1])
    expected = native_greedy(other, tiny_vlm, rows)
    assert [s.token_ids for s in changed] == [s.token_ids for s in expected]
    assert [s.token_ids for s in changed] != [s.token_ids for s in before]
    assert {s.weight_version for s in changed} == {version}
    base = load_causal_lm(tiny_vlm)
    old = str(write_weights(tmp_path / "old", base.named_parameters()))
    asyncio.run(vllm.update_weights_from_disk(old, vllm.version + 1))
    restored = vllm.generate_batch(rows[0], GREEDY, images=rows[1])
    assert [s.token_ids for s in restored] == [s.token_ids for s in before]


def test_an_rl_run_on_image_prompts_with_vllm_generating(tiny_vlm, tmp_path):
    """The trainer's weights (names from the FSDP actor) reach vLLM every step, and what it
    samples on image rows scores under the trainer as it did under vLLM."""
    run = image_run(tiny_vlm, tmp_path, "rollout.engine=vllm", "trainer.total_steps=3")
    train_rl(run)
    mismatch = metric(tmp_path / "run", "rollout/mismatch_kl")
    assert len(mismatch) == 3 and max(mismatch) < 1e-5  # measured: below 1e-6
