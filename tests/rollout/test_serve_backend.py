"""``rollout.engine=serve``: ``ascent serve`` processes as the rollout backend, against real
servers. They give what the native engine gives in process (tokens, log-probs), take new
weights between decode steps with per-token versions, and are restarted with the latest
weights when they die (an async RL run on them: tests/trainer/test_async_rl.py)."""

import asyncio
import time

import httpx
import pytest
import torch

from ascent.models import load_causal_lm
from ascent.models.loading import causal_lm_from_config
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.backends import start_backend
from ascent.rollout.background import BackgroundBackend
from ascent.rollout.serve_args import ADMIN_TOKEN_ENV
from ascent.rollout.serve_backend import ServeBackend
from ascent.rollout.weight_files import write_weights
from ascent.workers.rollout import RolloutConfig

pytestmark = pytest.mark.integration
PROMPTS = [[5, 17, 33, 70, 71, 80, 90, 100], [100, 3, 9], list(range(40, 75))]
GREEDY = SamplingParams(temperature=0, max_new_tokens=16)


@pytest.fixture(scope="module")
def served(tiny_model):
    """One rollout rank's server, started the way the rollout worker starts it."""
    settings = {"model": {"path": tiny_model}, "engine": "serve", "max_model_len": 2048}
    rollout = RolloutConfig.model_validate({**settings, "max_num_seqs": 8})
    backend = start_backend(rollout, None, rank=0, device=torch.device("cpu"))
    yield backend
    asyncio.run(backend.close())


def native(model) -> NativeEngine:
    return NativeEngine(model, EngineLimits(max_num_seqs=4, max_model_len=2048))


def load(backend: ServeBackend, model, directory, version: int = 1) -> int:
    path = str(write_weights(directory, model.named_parameters()))
    return asyncio.run(backend.update_weights_from_disk(path, version))


def test_tokens_and_log_probs_equal_the_native_engine_in_process(served, tiny_model):
    expected = native(load_causal_lm(tiny_model)).generate(PROMPTS, GREEDY)
    got = served.generate_batch(PROMPTS, GREEDY)
    for a, b in zip(expected, got, strict=True):
        assert b.token_ids == a.token_ids
        assert b.log_probs == pytest.approx(a.log_probs, abs=1e-5)
        assert b.weight_versions == [served.version] * len(b.token_ids)


def wait_until_running(url: str, sequences: int) -> None:
    """Until the server's running batch holds ``sequences``: each has sampled its first
    token (admission samples it), so an update from now on lands in flight."""
    deadline = time.monotonic() + 120  # a guard against hangs only
    while httpx.get(f"{url}/health").json()["running"] < sequences:
        assert time.monotonic() < deadline, f"{sequences} sequences never ran at {url}"
        time.sleep(0.01)


def test_an_update_in_flight_lands_between_decode_steps_with_per_token_versions(
    served, tiny_model, tmp_path
):
    """Responses in flight go on under the new weights; each token names the weights that
    sampled it, so one response holds both versions, in order. Requests after the update
    sample from the new weights alone."""
    base = load_causal_lm(tiny_model)
    other = causal_lm_from_config(base.config, seed=11)
    background = BackgroundBackend(served)
    started = served.version
    long = GREEDY.model_copy(update={"max_new_tokens": 1500})  # far more than the update takes
    try:
        background.submit("in-flight", PROMPTS[:2], long)
        wait_until_running(served.urls[0], 2)
        version = background.call(background.refresh_weights(other.named_parameters(), 1))
        spanning = background.take("in-flight")
        background.submit("after", PROMPTS, GREEDY)
        after = background.take("after")
    finally:
        background.stop()
        load(served, base, tmp_path / "old")
    assert version == started + 1
    for sample in spanning:
        assert sample.finish_reason == "length", "held, not aborted"
        versions = sample.weight_versions
        assert versions == sorted(versions) and set(versions) == {started, version}, versions
    expected = native(other).generate(PROMPTS, GREEDY)
    assert [s.token_ids for s in after] == [s.token_ids for s in expected]
    assert {v for s in after for v in s.weight_versions} == {version}


def test_a_dead_server_restarts_with_the_latest_weights_and_the_version_count(
    served, tiny_model, tmp_path
):
    """The restarted server counts its loads from 0 again; the backend's versions go on. A
    second client of a server that has loaded weights before starts from that server's
    count."""
    other = causal_lm_from_config(load_causal_lm(tiny_model).config, seed=12)
    version = load(served, other, tmp_path / "latest")
    expected = served.generate_batch(PROMPTS[:1], GREEDY)
    process = served.processes[0]
    process.process.kill()
    process.process.wait()
    again = served.generate_batch(PROMPTS[:1], GREEDY)  # restarts it, reloads, retries
    assert process.starts == 2
    assert again[0].token_ids == expected[0].token_ids
    assert set(again[0].weight_versions) == {version}
    token = served.processes[0].env[ADMIN_TOKEN_ENV]  # a newcomer is told the server's token
    newcomer = ServeBackend([served.urls[0]], "policy", admin_token=token)
    assert set(newcomer.generate_batch(PROMPTS[:1], GREEDY)[0].weight_versions) == {0}


def test_a_server_started_here_takes_control_calls_from_this_backend_alone(served):
    """Loopback is shared by every user of the machine: the server gets a fresh admin token
    that only its backend sends (its calls above all worked); anyone else gets a 401."""
    url = served.urls[0]
    assert httpx.post(f"{url}/pause", params={"mode": "keep"}).status_code == 401
    assert httpx.post(f"{url}/update_weight_version", json={"new_version": 9}).status_code == 401
    assert httpx.get(f"{url}/health").status_code == 200


def test_a_server_without_per_token_versions_is_refused_by_name(served):
    with pytest.raises(RuntimeError, match="no per-token weight_versions"):
        served._token_versions(0, {"token_ids": [1, 2]}, 0)


def test_weights_carry_the_version_the_trainer_gives_them_and_a_restart_keeps_it(
    served, tiny_model, tmp_path
):
    """The trainer numbers its weights; the server stamps that number on every token they
    sample (no translation on the client), and a restarted server is given it again."""
    other = causal_lm_from_config(load_causal_lm(tiny_model).config, seed=13)
    path = str(write_weights(tmp_path / "numbered", other.named_parameters()))
    assert asyncio.run(served.update_weights_from_disk(path, version=41)) == 41
    assert asyncio.run(served.weight_version()) == 41
    assert {v for s in served.generate_batch(PROMPTS, GREEDY) for v in s.weight_versions} == {41}
    process = served.processes[0]
    process.process.kill()
    process.process.wait()
    again = served.generate_batch(PROMPTS[:1], GREEDY)  # restarted with the latest weights
    assert set(again[0].weight_versions) == {41}
