"""The gateway with the official ``openai`` client: an episode's session answers chat calls
(with tools, streamed or not) and completions under any model name, records each call's
tokens as the engine read and sampled them, samples as the run says (not as the agent asks),
and refuses a stale URL and calls past the budget with errors the client raises."""

import httpx
import openai
import pytest

from ascent.gateway.samples import calls_to_samples
from ascent.rollout import SamplingParams
from tests.gateway.agents import ADD

TOOLS = [ADD]
RUN_SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=64, seed=0)


def client(gateway, session) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url(session), api_key="unused", max_retries=0)


def test_chat_calls_are_recorded_exactly_and_merge_into_one_sample(gateway):
    session = gateway.sessions.open({"prompt": "add"}, RUN_SAMPLING, max_calls=4)
    agent = client(gateway, session)
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    first = agent.chat.completions.create(
        model="gpt-4o", messages=messages, tools=TOOLS, max_tokens=6, temperature=0
    )
    # The history sent back as the client returned it: the next prompt continues the
    # tokens the model wrote (continuation.py), so both calls make one sample.
    messages += [first.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "user", "content": "Check it."}]
    stream = agent.chat.completions.create(
        model="any", messages=messages, tools=TOOLS, max_tokens=6, stream=True
    )
    streamed = [chunk for chunk in stream]

    calls = gateway.sessions.close(session).calls
    assert len(calls) == 2
    extra = first.choices[0].model_extra
    assert list(calls[0].response_ids) == extra["token_ids"]
    assert list(calls[0].prompt_ids) == extra["prompt_token_ids"]
    assert list(calls[1].response_ids) == [
        t for chunk in streamed for t in (chunk.choices[0].model_extra or {}).get("token_ids", [])
    ]
    # The agent's length within the run's budget, sampled as the run samples.
    assert all(0 < len(call.response_ids) <= 6 for call in calls)
    held = [*calls[0].prompt_ids, *calls[0].response_ids]
    assert list(calls[1].prompt_ids[: len(held)]) == held
    assert all(lp <= 0 for call in calls for lp in call.log_probs)

    samples = calls_to_samples(calls)
    assert len(samples) == 1
    trained = [
        t for s in samples for t, m in zip(s.response_ids, s.response_mask, strict=True) if m
    ]
    assert trained == [*calls[0].response_ids, *calls[1].response_ids]


def test_completions_with_token_ids(gateway):
    session = gateway.sessions.open({}, RUN_SAMPLING, max_calls=1)
    out = client(gateway, session).completions.create(model="m", prompt=[5, 6, 7], max_tokens=3)
    (call,) = gateway.sessions.close(session).calls
    assert call.prompt_ids == (5, 6, 7)
    assert list(call.response_ids) == out.choices[0].model_extra["token_ids"]
    assert len(call.response_ids) <= 3


def test_a_stale_url_and_a_spent_budget_are_errors_the_client_raises(gateway):
    session = gateway.sessions.open({}, RUN_SAMPLING, max_calls=1)
    agent = client(gateway, session)
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    agent.chat.completions.create(**ask)
    with pytest.raises(openai.BadRequestError, match="made its 1 calls"):
        agent.chat.completions.create(**ask)
    assert session.errors == ["max_turns"] and len(session.calls) == 1
    gateway.sessions.close(session)
    with pytest.raises(openai.NotFoundError, match="no live episode"):
        agent.chat.completions.create(**ask)
    with pytest.raises(openai.BadRequestError, match="one choice"):
        client(gateway, gateway.sessions.open({}, RUN_SAMPLING, 1)).chat.completions.create(
            n=2, **ask
        )


def test_reward_reports_are_kept_and_bad_ones_name_their_field(gateway):
    session = gateway.sessions.open({}, RUN_SAMPLING, max_calls=2)
    url = f"{gateway.base_url(session)}/reward"
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    client(gateway, session).chat.completions.create(**ask)
    bad = [  # (the body as sent, the field its 400 names)
        (b"not json", None),
        (b'{"score": 1.0}', "reward"),
        (b'{"reward": "1"}', "reward"),
        (b'{"reward": Infinity}', "reward"),
        (b'{"reward": 1.0, "call": 1}', "call"),  # only call 0 has finished
        (b'{"reward": 1.0, "call": true}', "call"),
    ]
    for body, field in bad:
        answer = httpx.post(url, content=body, headers={"content-type": "application/json"})
        assert answer.status_code == 400, body
        assert answer.json()["error"]["param"] == field, answer.json()
    assert httpx.post(url, json={"reward": 0.5, "call": "last"}).json() == {"ok": True}
    assert httpx.post(url, json={"reward": 2}).json() == {"ok": True}
    closed = gateway.sessions.close(session)
    assert (closed.reward, closed.call_rewards) == (2.0, {0: 0.5})
    assert [call.reward for call in closed.recorded_calls()] == [0.5]
    assert httpx.post(url, json={"reward": 1.0}).status_code == 404  # the episode is over
