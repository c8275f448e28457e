"""A request the engine cannot serve fails alone: token ids outside the vocabulary are refused
before they reach the model, and a prompt whose prefill raises anyway (it got past the check)
fails with its error while the prompts prefilled beside it, and the batch already decoding,
give exactly the tokens they give without it."""

import pytest

from ascent.models import load_causal_lm
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.rollout.requests import EngineRequest

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)
GOOD = [[5, 17, 33, 70], [100, 3, 9], [40, 41, 42, 43, 44]]


@pytest.fixture
def engine(tiny_model):
    return NativeEngine(load_causal_lm(tiny_model), EngineLimits(max_num_seqs=8, max_model_len=64))


def test_token_ids_outside_the_vocabulary_are_refused_by_name(engine):
    vocab = engine.vocab_size
    for prompt, bad, position in (([999_999_999], 999_999_999, 0), ([3, -5], -5, 1)):
        with pytest.raises(ValueError) as refused:
            engine.check_request(prompt, GREEDY, "the prompt")
        message = str(refused.value)
        assert f"token id {bad} at position {position}" in message
        assert f"[0, {vocab})" in message and "vocabulary size" in message
    engine.check_request([0, vocab - 1], GREEDY, "the prompt")  # both ends are ids


def run_requests(engine, prompts, decoding_first=None):
    """Every prompt as its own request (``decoding_first`` admitted a step before them);
    steps until all finish. Returns the requests, their samples, and the errors raised."""
    done, raised = {}, []

    def request(index, prompt):
        return EngineRequest(prompt, GREEDY, lambda s: done.setdefault(index, s), index=index)

    requests = {}
    if decoding_first is not None:
        requests["first"] = request("first", decoding_first)
        engine.scheduler.add(requests["first"])
        engine.step()
    for index, prompt in enumerate(prompts):
        requests[index] = request(index, prompt)
        engine.scheduler.add(requests[index])  # past check_request, as a bug would be
    while engine.has_work():
        try:
            engine.step()
        except Exception as error:
            raised.append(error)
    return requests, done, raised


def test_a_prompt_whose_prefill_raises_fails_alone(engine):
    _, alone, _ = run_requests(engine, GOOD, decoding_first=[7, 8, 9])
    bad = [1, 2, engine.vocab_size + 5]
    requests, done, raised = run_requests(engine, [GOOD[0], bad, *GOOD[1:]], [7, 8, 9])

    assert len(raised) == 1 and isinstance(raised[0], IndexError)
    assert requests[1].error is raised[0]
    assert done[1].finish_reason == "error" and done[1].token_ids == []
    assert done["first"].token_ids == alone["first"].token_ids, "the running batch went on"
    for index, good in ((0, 0), (2, 1), (3, 2)):
        assert requests[index].error is None
        assert done[index].token_ids == alone[good].token_ids
    assert not engine.has_work() and engine.scheduler.running == 0


def test_a_failed_decode_step_fails_the_running_batch_and_the_engine_serves_on(engine):
    decode, failing = engine.decode, [True]

    def decode_or_fail(*args):
        if failing and failing.pop():
            raise RuntimeError("device lost")
        return decode(*args)

    engine.decode = decode_or_fail
    _, done, raised = run_requests(engine, GOOD[:2])
    assert [str(e) for e in raised] == ["device lost"]
    assert all(done[i].finish_reason == "error" for i in (0, 1))
    assert all(len(done[i].token_ids) == 1 for i in (0, 1)), "the tokens before the failure"
    again = engine.generate(GOOD[:2], GREEDY)
    assert [s.finish_reason for s in again] == ["length", "length"]


def test_a_batch_call_that_fails_leaves_none_of_its_requests_behind(engine):
    """Two prompts, one slot: the second still waits when the first one's decode fails."""
    engine = NativeEngine(engine.model, EngineLimits(max_num_seqs=1, max_model_len=64))
    decode = engine.decode

    def fails(*args):
        raise RuntimeError("device lost")

    engine.decode = fails
    with pytest.raises(RuntimeError, match="device lost"):
        engine.generate(GOOD[:2], GREEDY)
    assert not engine.has_work()
    engine.decode = decode
    assert len(engine.generate(GOOD[:2], GREEDY)) == 2
