"""The native engine as a service: requests from staggered callers join the running batch,
weights change between decode steps (each token says which version produced it), the pause
modes, and the protocol's capability errors."""

import asyncio

import pytest

from ascent.models import load_causal_lm, load_tokenizer
from ascent.models.loading import causal_lm_from_config
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.native_backend import DEGRADED_AFTER, NativeBackend
from ascent.rollout.protocol import Capability, CapabilityError, RolloutBackend, StreamedToken

GREEDY = SamplingParams(temperature=0, max_new_tokens=200)


@pytest.fixture
def backend(tiny_model):
    engine = NativeEngine(
        load_causal_lm(tiny_model),
        EngineLimits(max_num_seqs=8, max_model_len=256),
        tokenizer=load_tokenizer(tiny_model),
    )
    return NativeBackend(engine)


def run(backend, coroutine):
    async def main():
        try:
            return await coroutine
        finally:
            await backend.close()

    return asyncio.run(main())


def test_a_request_sent_while_another_decodes_is_admitted_at_once(backend):
    """The long response (200 tokens) is in flight when the short one (5) arrives: the short
    one joins the running batch and finishes while the long one still decodes, after a
    handful of steps rather than after the long one."""
    steps = []
    step = backend.engine.step

    def counted():
        steps.append(backend.engine.scheduler.running)
        step()

    backend.engine.step = counted

    async def main():
        long = asyncio.create_task(backend.generate([1, 2, 3], GREEDY))
        while len(steps) < 20:  # the long request is decoding
            await asyncio.sleep(0.001)
        started = len(steps)
        short = await backend.generate([4, 5, 6], GREEDY.model_copy(update={"max_new_tokens": 5}))
        finished = len(steps)
        assert not long.done()
        return short, await long, started, finished

    short, long, started, finished = run(backend, main())
    assert len(short.token_ids) == 5 and len(long.token_ids) == 200
    assert finished - started <= 10, "the short request waited for the long one"
    assert max(steps) == 2, "both decoded in the same batch"


def test_concurrent_callers_get_what_each_would_get_alone(backend):
    prompts = [[i, i + 1, i + 2] for i in range(0, 60, 4)]
    params = SamplingParams(temperature=0, max_new_tokens=12)
    alone = backend.engine.generate(prompts, params)

    async def main():
        return await asyncio.gather(*(backend.generate(p, params) for p in prompts))

    together = run(backend, main())
    assert [o.token_ids for o in together] == [s.token_ids for s in alone]
    for out, sample in zip(together, alone, strict=True):
        assert out.log_probs == pytest.approx(sample.log_probs, abs=1e-5)


def test_keep_mode_weight_update_changes_the_version_mid_response(backend, tiny_model):
    other = causal_lm_from_config(load_causal_lm(tiny_model).config, seed=5)
    alone = backend.engine.generate([[1, 2, 3]], GREEDY)[0]

    async def main():
        response = asyncio.create_task(backend.generate([1, 2, 3], GREEDY))
        while (
            backend.engine.scheduler.running == 0
            or backend.engine.scheduler.generated_lengths()[0] < 30
        ):
            await asyncio.sleep(0.001)
        await backend.pause("keep")
        version = await backend.update_weights(other.named_parameters(), version=1)
        await backend.resume()
        return version, await response

    version, out = run(backend, main())
    switch = out.weight_versions.index(version)
    assert 30 <= switch < 200
    assert set(out.weight_versions[:switch]) == {version - 1}
    assert set(out.weight_versions[switch:]) == {version}
    assert out.token_ids[:switch] == alone.token_ids[:switch], "old weights, same tokens"
    assert out.token_ids != alone.token_ids, "the new weights took over"


def test_pause_abort_returns_partial_responses_and_wait_lets_them_finish(backend):
    async def main():
        first = asyncio.create_task(backend.generate([1, 2], GREEDY))
        while backend.engine.scheduler.running == 0:
            await asyncio.sleep(0.001)
        await backend.pause("abort")
        aborted = await first
        queued = asyncio.create_task(backend.generate([3, 4], GREEDY))  # held while paused
        await asyncio.sleep(0.05)
        assert not queued.done()
        await backend.resume()
        second = asyncio.create_task(backend.generate([5, 6], GREEDY))
        # until the engine holds it (the queued request may be running already: pausing
        # before the second one arrives would hold it instead)
        while not any(r.prompt == [5, 6] for r in list(backend._live)):
            await asyncio.sleep(0.001)
        await backend.pause("wait")  # returns once in-flight requests are done
        assert second.done() and queued.done()
        await backend.resume()
        return aborted, await second

    aborted, finished = run(backend, main())
    assert aborted.finish_reason == "abort" and 0 < len(aborted.token_ids) < 200
    assert finished.finish_reason == "length" and len(finished.token_ids) == 200


def test_sync_batch_calls_and_capabilities(backend):
    samples = backend.generate_batch([[1, 2], [3]], SamplingParams(n=2, max_new_tokens=4, seed=1))
    again = backend.generate_batch([[1, 2], [3]], SamplingParams(n=2, max_new_tokens=4, seed=1))
    assert [s.token_ids for s in samples] == [s.token_ids for s in again]
    assert Capability.TOKEN_WEIGHT_VERSIONS in backend.capabilities

    class Frozen(RolloutBackend):
        name = "frozen endpoint"

    with pytest.raises(CapabilityError, match="frozen endpoint cannot update weights from disk"):
        asyncio.run(Frozen().update_weights_from_disk("x", version=1))
    with pytest.raises(ValueError, match="use generate_n"):
        run(backend, backend.generate([1], SamplingParams(n=2)))


def test_a_failing_step_fails_its_callers_and_the_backend_serves_on(backend):
    """A decode step that raises (the device lost, say) fails the requests in that batch;
    later ones are served; health turns "degraded" only while steps keep failing."""
    decode, failing = backend.engine.decode, []

    def decode_or_fail(*args):
        if failing and failing.pop():
            raise RuntimeError("device lost")
        return decode(*args)

    backend.engine.decode = decode_or_fail
    short = SamplingParams(temperature=0, max_new_tokens=4)

    async def main():
        failing.append(True)
        with pytest.raises(RuntimeError, match="device lost"):
            await backend.generate([1, 2, 3], GREEDY)
        after = await backend.generate([1, 2, 3], short)
        once = await backend.health()
        for _ in range(DEGRADED_AFTER):  # every step fails: one request each
            failing.append(True)
            with pytest.raises(RuntimeError, match="device lost"):
                await backend.generate([1, 2, 3], GREEDY)
        degraded = await backend.health()
        await backend.generate([1, 2, 3], short)
        return after, once, degraded, await backend.health()

    after, once, degraded, recovered = run(backend, main())
    assert len(after.token_ids) == 4
    assert once["status"] == "ok" and "device lost" in once["last_error"]
    assert once["failed_steps"] == 1
    assert degraded["status"] == "degraded"
    assert recovered["status"] == "ok" and recovered["failed_steps"] == 1 + DEGRADED_AFTER


def test_leaving_a_stream_early_aborts_its_request(backend):
    async def main():
        items = backend.stream([1, 2, 3], GREEDY)
        first = [await anext(items) for _ in range(5)]
        await items.aclose()  # the client went away
        while backend.engine.has_work():
            await asyncio.sleep(0.001)
        return first

    first = run(backend, main())
    assert all(isinstance(item, StreamedToken) for item in first)
    assert backend.engine.scheduler.running == 0, "the slot was freed"
