"""A chat call that sends back the history as the gateway returned it continues the last call
in tokens (one sample); a history the agent changed is rendered as it is (a new sample)."""

import openai

from ascent.gateway.samples import calls_to_samples
from ascent.rollout.protocol import render_chat
from ascent.rollout.types import SamplingParams

RUN = SamplingParams(temperature=1.0, max_new_tokens=96, seed=3)


def two_calls(gateway, edit=None, stop=None, second_tools=None):
    """Two chat calls; ``edit`` changes the returned assistant message before it is sent
    back. The session's calls, and the second call's messages."""
    session = gateway.sessions.open({}, RUN, max_calls=4)
    agent = openai.OpenAI(base_url=gateway.base_url(session), api_key="-", max_retries=0)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
    ]
    ask = {"model": "m", "max_tokens": 8, "stop": stop}
    first = agent.chat.completions.create(messages=messages, **ask)
    reply = first.choices[0].message.model_dump(exclude_none=True)
    messages += [edit(reply) if edit else reply, {"role": "user", "content": "Another."}]
    agent.chat.completions.create(messages=messages, tools=second_tools, **ask)
    return gateway.sessions.close(session).calls, messages


def continues(calls) -> bool:
    held = [*calls[0].prompt_ids, *calls[0].response_ids]
    return list(calls[1].prompt_ids[: len(held)]) == held


def test_the_returned_history_continues_in_tokens_even_past_a_stop_string(gateway):
    # The stop string is cut from the returned text, and kept in the tokens continued.
    for stop in (None, ["e", "o", " "]):
        calls, _ = two_calls(gateway, stop=stop)
        assert continues(calls)
        assert len(calls_to_samples(calls)) == 1


def test_a_changed_history_is_rendered_as_sent_and_starts_a_new_sample(gateway):
    def edited(reply):
        return {**reply, "content": "Blue."}

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    for calls, messages, sent_tools in (
        (*two_calls(gateway, edit=edited), None),
        (*two_calls(gateway, second_tools=tools), tools),
    ):
        assert not continues(calls)
        assert list(calls[1].prompt_ids) == render_chat(
            gateway.sessions.tokenizer, messages, sent_tools
        )
        samples = calls_to_samples(calls)
        assert len(samples) == 2
        masks = [zip(s.response_ids, s.response_mask, strict=True) for s in samples]
        trained = [t for pairs in masks for t, m in pairs if m]
        assert trained == [*calls[0].response_ids, *calls[1].response_ids]
