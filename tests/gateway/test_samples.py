"""Recorded calls become samples by the prefix rule (``ascent.gateway.samples``),
checked over random histories with rewrites: every sampled token is in exactly one sample,
in call order, with its log-prob and weight version, after exactly the context it was
sampled in; masks cover exactly the model's tokens; an agent that only extends its history
gives one sample, and each rewrite starts one more."""

import random

import pytest

from ascent.gateway.samples import RecordedCall, calls_to_samples

VOCAB = 50


def random_call(r: random.Random, prompt: list[int], version: int) -> RecordedCall:
    response = [r.randrange(VOCAB) for _ in range(r.randint(0, 6))]
    return RecordedCall(
        tuple(prompt),
        tuple(response),
        tuple(-r.random() for _ in response),
        (version,) * len(response),
        reward=r.choice([None, None, r.random()]),
    )


def random_episode(r: random.Random) -> tuple[list[RecordedCall], int]:
    """Calls of an agent that mostly sends its history back with something appended, and
    sometimes rewrites it (a new first token: the history cannot be a prefix of it). Returns
    the calls and how many rewrites there were."""
    calls, rewrites = [], 0
    history = [r.randrange(VOCAB) for _ in range(r.randint(1, 8))]
    for turn in range(r.randint(1, 8)):
        if turn and r.random() < 0.3:
            kept = history[r.randint(1, len(history)) :]
            history = [VOCAB + turn, *kept]  # an id the other calls never use
            rewrites += 1
        elif turn:
            history = history + [r.randrange(VOCAB) for _ in range(r.randint(0, 5))]
        call = random_call(r, history, version=turn // 3)
        calls.append(call)
        history = history + list(call.response_ids)
    return calls, rewrites


def sampled_spans(sample):
    return [
        (token, lp, v)
        for token, mask, lp, v in zip(
            sample.response_ids,
            sample.response_mask,
            sample.log_probs,
            sample.weight_versions,
            strict=True,
        )
        if mask
    ]


@pytest.mark.parametrize("seed", range(300))
def test_random_histories_with_rewrites(seed):
    r = random.Random(seed)
    calls, rewrites = random_episode(r)
    samples = calls_to_samples(calls)

    # Every sampled token once, in call order, with its log-prob and version.
    expected = [
        (t, lp, v)
        for call in calls
        for t, lp, v in zip(call.response_ids, call.log_probs, call.weight_versions, strict=True)
    ]
    assert [span for sample in samples for span in sampled_spans(sample)] == expected

    # The rest is rendered: no log-prob, no version; a sample ends on a sampled token.
    for sample in samples:
        spans = zip(sample.response_mask, sample.log_probs, sample.weight_versions, strict=True)
        for mask, lp, v in spans:
            assert mask in (0, 1) and (mask or (lp == 0.0 and v == -1))
        assert sample.response_mask[-1] == 1

    # Each call's tokens follow exactly the context the engine read.
    for call in calls:
        if call.response_ids:
            seen = list(call.prompt_ids + call.response_ids)
            assert any(s.token_ids[: len(seen)] == seen for s in samples), "context changed"

    # One sample, and one more per rewrite (less those whose calls sampled nothing).
    with_tokens = _samples_with_tokens(calls)
    assert len(samples) == with_tokens <= 1 + rewrites


def _samples_with_tokens(calls: list[RecordedCall]) -> int:
    """How many samples hold a sampled token: the runs of calls between rewrites (a call
    whose prompt does not extend the one before it plus its response) that sampled any."""
    runs, previous = [], None
    for call in calls:
        extends = previous is not None and call.prompt_ids[: len(previous)] == previous
        if not extends:
            runs.append(0)
        runs[-1] += len(call.response_ids)
        previous = call.prompt_ids + call.response_ids
    return sum(1 for tokens in runs if tokens)


def test_an_agent_that_extends_its_history_gives_one_sample_with_its_rewards():
    first = RecordedCall((1, 2, 3), (10, 11), (-0.1, -0.2), (0, 0), reward=0.5)
    second = RecordedCall((1, 2, 3, 10, 11, 7, 8), (12,), (-0.3,), (1,), reward=1.0)
    (sample,) = calls_to_samples([first, second])
    assert sample.prompt_ids == [1, 2, 3]
    assert sample.response_ids == [10, 11, 7, 8, 12]
    assert sample.response_mask == [1, 1, 0, 0, 1]
    assert sample.log_probs == [-0.1, -0.2, 0.0, 0.0, -0.3]
    assert sample.weight_versions == [0, 0, -1, -1, 1]
    assert sample.turn_rewards == [(1, 0.5), (4, 1.0)]


def test_a_rewritten_history_starts_a_new_sample():
    first = RecordedCall((1, 2, 3), (10, 11), (-0.1, -0.2), (0, 0))
    summarised = RecordedCall((1, 9, 10, 11), (12,), (-0.3,), (0,))  # the history, rewritten
    samples = calls_to_samples([first, summarised])
    assert [s.token_ids for s in samples] == [[1, 2, 3, 10, 11], [1, 9, 10, 11, 12]]
    assert [s.response_mask for s in samples] == [[1, 1], [1]]
