"""Outside agents' episodes through the gateway: an async agent (``openai.AsyncOpenAI``) and
a synchronous one (``openai.OpenAI``, in a thread) play at once and their calls become their
samples; an agent that raises, hangs, returns no reward or calls past its budget ends its own
episode with a reason and the failed reward, and a cancelled agent's late call cannot reach
its closed session."""

import asyncio
import threading

import openai
import pytest

from ascent.gateway.episodes import EpisodeLimits, play_outside_episode
from ascent.rollout.types import SamplingParams

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=64, seed=0)
LIMITS = EpisodeLimits(max_calls=3, timeout_s=120.0, failed_reward=-1.0)


async def async_agent(base_url: str, row: dict) -> dict:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="-", max_retries=0)
    messages = [{"role": "user", "content": row["prompt"]}]
    for _ in range(2):
        out = await client.chat.completions.create(model="agent", messages=messages, max_tokens=5)
        messages += [
            {"role": "assistant", "content": out.choices[0].message.content or ""},
            {"role": "user", "content": "again"},
        ]
    return {"reward": 1.0, "turns": 2}


def sync_agent(base_url: str, row: dict) -> float:
    client = openai.OpenAI(base_url=base_url, api_key="-", max_retries=0)
    client.chat.completions.create(
        model="agent", messages=[{"role": "user", "content": "x"}], max_tokens=5
    )
    return 0.5


def play(gateway, agent, limits=LIMITS, row=None):
    return play_outside_episode(gateway, agent, row or {"prompt": "hi"}, SAMPLING, limits)


def test_async_and_sync_agents_play_at_once(gateway):
    async def both():
        return await asyncio.gather(play(gateway, async_agent), play(gateway, sync_agent))

    first, second = asyncio.run(both())
    assert (first.end, first.reward, first.metrics) == ("done", 1.0, {"turns": 2.0})
    assert (second.end, second.reward) == ("done", 0.5)
    assert len(first.calls) == 2 and len(second.calls) == 1
    for episode in (first, second):
        sampled = [t for call in episode.calls for t in call.response_ids]
        trained = [
            t
            for s in episode.samples
            for t, m in zip(s.response_ids, s.response_mask, strict=True)
            if m
        ]
        assert trained == sampled
    assert len(gateway.sessions) == 0, "sessions close with their episodes"


def test_an_agent_that_raises_or_returns_nothing_fails_its_episode(gateway):
    async def raises(base_url, row):
        await async_agent(base_url, row)
        raise KeyError("tool 'search' crashed")

    async def returns_nothing(base_url, row):
        return None

    async def bad_reward(base_url, row):
        return {"score": 1.0}

    failed = asyncio.run(play(gateway, raises))
    assert (failed.end, failed.reward) == ("error", -1.0)
    assert "KeyError" in failed.error and len(failed.calls) == 2  # its calls still train
    nothing = asyncio.run(play(gateway, returns_nothing))
    assert (nothing.end, nothing.calls) == ("error", []) and "returned None" in nothing.error
    assert "'reward' key" in asyncio.run(play(gateway, bad_reward)).error


def test_a_hanging_agent_times_out_and_cannot_call_its_closed_session(gateway):
    release, finished, late = threading.Event(), threading.Event(), {}

    def hangs(base_url, row):
        try:
            client = openai.OpenAI(base_url=base_url, api_key="-", max_retries=0)
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
            release.wait(120)  # stuck in its own code, past the time limit
            try:
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "y"}]
                )
            except openai.NotFoundError as gone:
                late["error"] = gone
            return 1.0
        finally:
            finished.set()

    limits = EpisodeLimits(max_calls=3, timeout_s=5.0, failed_reward=-1.0)  # its 1st call: ~0.1 s
    # The episode ends (and asyncio.run returns) while the agent's thread is still stuck:
    # a hung synchronous agent does not hold up the rollout.
    episode = asyncio.run(play(gateway, hangs, limits))
    assert not finished.is_set()
    assert (episode.end, episode.reward, len(episode.calls)) == ("timeout", -1.0, 1)
    release.set()  # the agent's late call goes out now
    assert finished.wait(120)
    assert "no live episode" in str(late["error"])


def test_calls_past_the_budget_end_the_episode_as_max_turns(gateway):
    async def chatty(base_url, row):
        client = openai.AsyncOpenAI(base_url=base_url, api_key="-", max_retries=0)
        ask = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
        for _ in range(5):
            try:
                await client.chat.completions.create(**ask)
            except openai.BadRequestError:
                return 0.25  # it stops when told, with the reward it has
        return 1.0

    episode = asyncio.run(play(gateway, chatty))
    assert (episode.end, episode.reward, len(episode.calls)) == ("max_turns", 0.25, 3)


@pytest.mark.parametrize("reward", [float("nan"), True, "1"])
def test_a_reward_that_is_not_a_number_is_the_agents_error(gateway, reward):
    async def agent(base_url, row):
        return reward

    episode = asyncio.run(play(gateway, agent))
    assert episode.end == "error" and "finite number" in episode.error
