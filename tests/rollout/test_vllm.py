"""vLLM as a rollout backend, against a real vLLM server (the CPU build, from its own venv:
``make vllm-venv``; ``make test`` builds it first). Skipped when no vLLM interpreter exists.

The model has head_dim 32: vLLM's CPU attention has no kernel for the default tiny model's 16.
"""

import asyncio
import time

import pytest

from ascent.models import build_tiny_model, load_causal_lm
from ascent.models.loading import causal_lm_from_config
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.http_backend import HTTPBackend
from ascent.rollout.server_process import ServerDied
from ascent.rollout.vllm_server import start_vllm_servers, vllm_python
from ascent.rollout.weight_files import write_weights
from ascent.trainer.rl.loop import train_rl
from ascent.workers.rollout import RolloutConfig
from tests.servers import ascent_serve, vllm_server
from tests.trainer.rl_setup import config, metric
from tests.trainer.test_async_rl import learns_async
from tests.trainer.test_rl_trainer import assert_learned

try:
    PYTHON = vllm_python()
except FileNotFoundError as missing:
    pytest.skip(str(missing), allow_module_level=True)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
PROMPTS = [[5, 17, 33, 70, 71, 80, 90, 100], [100, 3, 9], list(range(40, 75))]
GREEDY = SamplingParams(temperature=0, max_new_tokens=16)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("hd32") / "model", heads=2, kv_heads=1))


@pytest.fixture(scope="module")
def vllm(model_dir, tmp_path_factory):
    with vllm_server(model_dir, tmp_path_factory.mktemp("vllm-logs"), PYTHON, 16) as backend:
        yield backend


def test_greedy_tokens_and_log_probs_agree_in_process_served_and_vllm(vllm, model_dir, tmp_path):
    engine = NativeEngine(
        load_causal_lm(model_dir), EngineLimits(max_num_seqs=4, max_model_len=256)
    )
    native = engine.generate(PROMPTS, GREEDY)
    with ascent_serve(model_dir, tmp_path / "serve.log", "--max-model-len", "256") as served:
        ascent_http = HTTPBackend([served.url], model_dir)  # the same OpenAI token-in protocol
        through_serve = ascent_http.generate_batch(PROMPTS, GREEDY)
    through_vllm = vllm.generate_batch(PROMPTS, GREEDY)
    for a, b, c in zip(native, through_serve, through_vllm, strict=True):
        assert a.token_ids == b.token_ids == c.token_ids
        assert b.log_probs == pytest.approx(a.log_probs, abs=1e-5)
        assert c.log_probs == pytest.approx(a.log_probs, abs=1e-4)


def test_weight_refresh_changes_generations_and_the_old_weights_restore_them(
    vllm, model_dir, tmp_path
):
    before = vllm.generate_batch(PROMPTS, GREEDY)
    base = load_causal_lm(model_dir)
    other = causal_lm_from_config(base.config, seed=11)
    version = asyncio.run(
        vllm.update_weights_from_disk(
            str(write_weights(tmp_path / "new", other.named_parameters())), vllm.version + 1
        )
    )
    changed = vllm.generate_batch(PROMPTS, GREEDY)
    expected = NativeEngine(other, EngineLimits(max_num_seqs=4, max_model_len=256)).generate(
        PROMPTS, GREEDY
    )
    assert [s.token_ids for s in changed] == [s.token_ids for s in expected]
    assert [s.token_ids for s in changed] != [s.token_ids for s in before]
    assert {s.weight_version for s in changed} == {version}
    old = str(write_weights(tmp_path / "old", base.named_parameters()))
    asyncio.run(vllm.update_weights_from_disk(old, vllm.version + 1))
    restored = vllm.generate_batch(PROMPTS, GREEDY)
    assert [s.token_ids for s in restored] == [s.token_ids for s in before]


def test_a_dead_server_is_restarted_with_the_latest_weights(vllm, model_dir, tmp_path):
    other = causal_lm_from_config(load_causal_lm(model_dir).config, seed=12)
    path = write_weights(tmp_path / "latest", other.named_parameters())
    asyncio.run(vllm.update_weights_from_disk(str(path), vllm.version + 1))
    expected = vllm.generate_batch(PROMPTS[:1], GREEDY)
    vllm.processes[0].process.kill()
    vllm.processes[0].process.wait()
    again = vllm.generate_batch(PROMPTS[:1], GREEDY)  # restarts it, reloads, retries
    assert vllm.processes[0].starts == 2
    assert again[0].token_ids == expected[0].token_ids
    time.sleep(2)  # a server started from a pool thread died when that thread ended
    assert vllm.processes[0].alive(), "the restarted server outlives the call that restarted it"


def test_a_server_that_cannot_start_reports_its_log(tmp_path):
    config = RolloutConfig.model_validate(
        {"model": {"path": str(tmp_path / "missing")}, "engine": "vllm"}
    )
    with pytest.raises(ServerDied, match="last lines of"):
        start_vllm_servers(
            1,
            tmp_path,
            120,
            python=PYTHON,
            settings=config.model_copy(
                update={"max_model_len": 64, "max_num_seqs": 2, "dtype": "float32"}
            ),
            seed=0,
            cpu=True,
            extra_args=[],
        )


@pytest.mark.learning
def test_grpo_with_vllm_rollouts_learns(model_dir, prompts, tmp_path):
    """30 GRPO steps of the toy task generated by a vLLM server that is refreshed after every
    update: the score rises, and vLLM's log-probs stay those of the trained policy (the
    rollout/trainer mismatch KL is tiny at every step). The quickstart task on vLLM, four
    seeds: ``bench/async_learning.py --engine vllm`` (docs/guides/async.md)."""
    train_rl(config(model_dir, prompts, tmp_path, "trainer.total_steps=30", "rollout.engine=vllm"))
    assert_learned(tmp_path)
    mismatch = metric(tmp_path, "rollout/mismatch_kl")
    assert len(mismatch) == 30 and max(mismatch) < 1e-2, max(mismatch)


def test_a_weight_update_in_flight_holds_requests_and_they_finish(vllm, model_dir, tmp_path):
    """trainer.mode=async with vLLM: requests in flight are held (pause "keep") while the
    servers reload, then finish; their tokens name the version they started under, and the
    requests after the update sample from the new weights."""
    from ascent.rollout.background import BackgroundBackend

    base = load_causal_lm(model_dir)
    other = causal_lm_from_config(base.config, seed=11)
    background = BackgroundBackend(vllm)
    started = vllm.version
    try:
        background.submit("in-flight", PROMPTS, GREEDY.model_copy(update={"max_new_tokens": 200}))
        time.sleep(0.2)

        version = background.call(background.refresh_weights(other.named_parameters(), started + 1))
        held = background.take("in-flight")
        background.submit("after", PROMPTS, GREEDY)
        after = background.take("after")
    finally:
        background.stop()
        old = str(write_weights(tmp_path / "old", base.named_parameters()))
        asyncio.run(vllm.update_weights_from_disk(old, vllm.version + 1))
    assert version == started + 1
    assert {s.finish_reason for s in held} <= {"length", "stop"}, "held, not aborted"
    assert {s.weight_version for s in held} == {started}
    expected = NativeEngine(other, EngineLimits(max_num_seqs=4, max_model_len=256)).generate(
        PROMPTS, GREEDY
    )
    assert [s.token_ids for s in after] == [s.token_ids for s in expected]
    assert {s.weight_version for s in after} == {version}


@pytest.mark.learning
def test_async_rl_with_vllm_rollouts_learns(model_dir, prompts, tmp_path):
    """trainer.mode=async on a vLLM server: each update is loaded with the server's requests
    held (pause keep, reload, resume) while training goes on, the toy digit task still
    learns, and the staleness stays within its bound."""
    learns_async(model_dir, prompts, tmp_path, "rollout.engine=vllm")
