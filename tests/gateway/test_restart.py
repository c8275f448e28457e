"""A gateway whose HTTP server stops (a crash, simulated by stopping it) loses no finished
episode: the episodes in flight end as errors with the calls they made, and the next batch
is served by a new server over the same sessions."""

import asyncio
import threading

import openai

from ascent.gateway.episodes import EpisodeLimits, play_outside_episode
from ascent.rollout.types import SamplingParams
from tests.gateway.conftest import make_gateway

SAMPLING = SamplingParams(temperature=1.0, max_new_tokens=64, seed=0)
LIMITS = EpisodeLimits(max_calls=4, timeout_s=120.0, failed_reward=-1.0)


def test_a_stopped_server_loses_no_finished_episode(tiny_model):
    gateway = make_gateway(tiny_model)
    first_call_done, server_stopped = threading.Event(), threading.Event()

    def agent(base_url, row):
        client = openai.OpenAI(base_url=base_url, api_key="-", max_retries=0)
        ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        client.chat.completions.create(**ask)
        if row.get("wait"):
            first_call_done.set()
            server_stopped.wait(60)
            client.chat.completions.create(**ask)  # the server is gone
        return 1.0

    async def batch():
        finished = await play_outside_episode(gateway, agent, {}, SAMPLING, LIMITS)
        waiting = asyncio.create_task(
            play_outside_episode(gateway, agent, {"wait": True}, SAMPLING, LIMITS)
        )
        await asyncio.to_thread(first_call_done.wait, 60)
        gateway.close()  # as if the server had crashed
        server_stopped.set()
        return finished, await waiting

    try:
        finished, cut = asyncio.run(batch())
        assert (finished.end, finished.reward, len(finished.calls)) == ("done", 1.0, 1)
        assert (cut.end, cut.reward, len(cut.calls)) == ("error", -1.0, 1)
        assert "Connection" in cut.error
        old_port = gateway.port
        gateway.ensure_running()
        assert gateway.restarts == 1 and gateway.port != old_port
        again = asyncio.run(play_outside_episode(gateway, agent, {}, SAMPLING, LIMITS))
        assert (again.end, len(again.calls)) == ("done", 1)
        assert (finished.end, len(finished.calls)) == ("done", 1)  # untouched
    finally:
        gateway.close()
