"""Agent frameworks as users run them, unchanged, against the gateway: an OpenAI Agents SDK
agent with a function tool and a LangGraph ReAct agent (``langchain-openai``) each play
episodes whose calls become samples, then train a few steps. Their packages are the
``agents`` extra; without it these tests skip."""

import asyncio

import pytest

from ascent.batch import Batch
from ascent.gateway.episodes import EpisodeLimits, play_outside_episode
from ascent.rollout.types import SamplingParams
from ascent.trainer.rl.loop import train_rl
from tests.gateway import agents
from tests.gateway.test_training import AGENT
from tests.trainer.rl_setup import config, metric

SDK = pytest.importorskip("agents", reason="the agents extra (openai-agents) is not installed")
pytest.importorskip("langgraph", reason="the agents extra (langgraph) is not installed")
pytest.importorskip("langchain_openai", reason="the agents extra (langchain-openai) is missing")

FRAMEWORKS = {
    "openai-agents": agents.openai_agents_sdk_agent,
    "langgraph": agents.langgraph_react_agent,
}
ROW = {"prompt": [{"role": "user", "content": "What is 2 + 3?"}]}


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_a_framework_agent_plays_its_episode_through_the_gateway(gateway, name):
    sampling = SamplingParams(temperature=1.0, max_new_tokens=128, seed=1)
    limits = EpisodeLimits(max_calls=3, timeout_s=120.0, failed_reward=-1.0)
    episode = asyncio.run(play_outside_episode(gateway, FRAMEWORKS[name], ROW, sampling, limits))
    assert episode.error is None and episode.end == "done"
    assert episode.reward == agents.row_reward(ROW)
    assert 1 <= len(episode.calls) <= 3
    sampled = [t for call in episode.calls for t in call.response_ids]
    trained = [
        t
        for sample in episode.samples
        for t, m in zip(sample.response_ids, sample.response_mask, strict=True)
        if m
    ]
    assert trained == sampled and sampled


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_a_framework_agent_trains(tiny_model, prompts, tmp_path, name):
    spec = f"tests.gateway.agents:{FRAMEWORKS[name].__name__}"
    dump = tmp_path / "rollouts"
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path / "run",
            *AGENT,
            f"rollout.agent.run={spec}",
            "rollout.max_response_length=128",
            "data.max_prompt_length=1024",
            "trainer.total_steps=2",
            f"trainer.dump_rollouts={dump}",
        )
    )
    assert metric(tmp_path / "run", "agent/end/done") == [1.0, 1.0]
    assert max(metric(tmp_path / "run", "rollout/mismatch_kl")) < 1e-3
    batch = Batch.load(dump / "step_00000002")
    assert float(batch["response_mask"].sum()) > 0
    for row in range(len(batch)):
        assert float(batch["scores"][row]) == agents.row_reward(
            {"prompt": batch["raw_prompt"][row]}
        )
