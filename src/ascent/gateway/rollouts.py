"""Outside agents' episodes as the rollout role's rows (``rollout.agent.run``): ``params.n``
episodes per prompt, each the user's agent function run against a gateway session of its
own, each turned into training rows in the layout of the in-process agent loop
(``ascent.agents.episodes.episodes_batch``), so everything after generation (scoring,
group statistics, metrics, the report) is shared with it.

Per row, beside that layout: ``agent_reward`` (B,), the reward the episode's agent gave
(``failed_reward`` for an episode that failed), and ``agent_acc`` (B,), its ``acc`` metric
when it returned one, else 1 for a positive reward and 0 otherwise: what validation and
metrics read as an episode's accuracy.

The gateway starts at the first rollout, in the rollout worker's process, over the
worker's in-process engine (beside training: the engine the background loop wraps), and
closes with the worker.
"""

import asyncio
from collections.abc import Callable
from typing import Any

import torch

from ascent.agents.config import AgentConfig
from ascent.agents.episodes import episodes_batch
from ascent.agents.loop import Episode, episode_samplings
from ascent.agents.rollouts import episode_rows
from ascent.agents.trajectory import Trajectory
from ascent.batch import Batch
from ascent.errors import InputError
from ascent.gateway.episodes import EpisodeLimits, OutsideEpisode, play_outside_episode
from ascent.gateway.server import Gateway
from ascent.importing import load_object
from ascent.rollout.protocol import Capability, RolloutBackend
from ascent.rollout.types import SamplingParams


def load_agent(spec: str) -> Callable[..., Any]:
    """The function ``rollout.agent.run`` names; InputError naming the field otherwise."""
    try:
        agent = load_object(spec)
    except InputError as error:
        raise InputError(f"rollout.agent.run={spec!r}: {error}") from error
    if not callable(agent):
        raise InputError(
            f"rollout.agent.run={spec!r} is not a function: give "
            "`async def run(base_url, row) -> reward`"
        )
    return agent


class OutsideRollouts:
    def __init__(
        self,
        config: AgentConfig,
        backend: RolloutBackend,
        *,
        pad_id: int,
        weight_version: Callable[[], int],
    ) -> None:
        if Capability.OPENAI_ROUTES not in backend.capabilities:
            raise ValueError(
                f"rollout.agent.run serves the policy over OpenAI routes, which the "
                f"{backend.name} has not"
            )
        self.config, self.backend = config, backend
        self.pad_id, self.weight_version = pad_id, weight_version
        self.agent = load_agent(config.run)
        self.limits = EpisodeLimits(config.max_turns, config.timeout_s, config.failed_reward)
        self.gateway: Gateway | None = None

    def generate(self, batch: Batch, params: SamplingParams) -> Batch:
        return self.collect(batch, self.backend.call(self.play(batch, params)), params)

    def submit(self, tag: str, batch: Batch, params: SamplingParams, together: bool) -> None:
        """Play the episodes beside training (``together`` does not apply: an agent's calls
        come when its code makes them)."""
        self.backend.submit_coroutine(tag, self.play(batch, params))

    async def play(self, batch: Batch, params: SamplingParams) -> list[OutsideEpisode]:
        """``params.n`` episodes of every row, all at once; ordered by row, then sample, and
        seeded as the in-process loop seeds its episodes (``episode_samplings``)."""
        gateway = self._gateway()
        jobs = [
            play_outside_episode(gateway, self.agent, row, sampling, self.limits)
            for row, sampling in episode_samplings(episode_rows(batch), params)
        ]
        return list(await asyncio.gather(*jobs))

    def collect(self, batch: Batch, outside: list[OutsideEpisode], params: SamplingParams) -> Batch:
        width = params.max_new_tokens
        episodes = [
            as_episode(episode, _prompt_ids(batch, k // params.n), width)
            for k, episode in enumerate(outside)
        ]
        _report_failures(outside)
        out = episodes_batch(batch, episodes, params.n, width, self.pad_id)
        rewards = [outside[e].reward for e in out["episode"]]
        acc = [_accuracy(outside[e]) for e in out["episode"]]
        return out.assign(
            agent_reward=torch.tensor(rewards, dtype=torch.float32),
            agent_acc=torch.tensor(acc, dtype=torch.float32),
        ).with_meta(weight_version=self.weight_version())

    def _gateway(self) -> Gateway:
        if self.gateway is None:
            self.gateway = Gateway(getattr(self.backend, "inner", self.backend))
        self.gateway.ensure_running()  # a server that stopped is replaced, sessions kept
        return self.gateway

    def close(self) -> None:
        if self.gateway is not None:
            self.gateway.close()
            self.gateway = None


def as_episode(outside: OutsideEpisode, prompt_ids: list[int], width: int) -> Episode:
    """The in-process loop's record of an outside episode. An episode with no sampled token
    (its agent failed before its first call) keeps one row, its row's prompt and no response,
    so its failed reward still counts in its group's statistics (it trains no token). A
    sample longer than ``width`` (concurrent calls of one agent raced for its room) is cut."""
    samples = outside.samples or [Trajectory(list(prompt_ids))]
    for sample in samples:
        if len(sample.response_ids) > width:
            sample.truncate(width)
    return Episode(
        samples=samples,
        messages=[],
        turns=len(outside.calls),
        end=outside.end,
        drifts=max(len(samples) - 1, 0),
    )


def _prompt_ids(batch: Batch, row: int) -> list[int]:
    mask = batch["prompt_mask"][row].bool()
    return batch["prompts"][row][mask].tolist()


def _accuracy(episode: OutsideEpisode) -> float:
    if "acc" in episode.metrics:
        return episode.metrics["acc"]
    return float(episode.reward > 0)


class AgentFailure(RuntimeError):
    """Every episode of a rollout batch failed: the agent is broken, not flaky; the step
    stops (the last checkpoint stands) rather than train on failed rewards alone."""


def _report_failures(episodes: list[OutsideEpisode]) -> None:
    """One line per rollout batch with failed agents: how many, and the first one's error;
    AgentFailure when all of several failed."""
    failed = [e for e in episodes if e.error is not None]
    if len(failed) == len(episodes) > 1:
        raise AgentFailure(
            f"rollout.agent.run: all {len(episodes)} episodes of the batch failed (first: "
            f"{failed[0].error}); fix the agent (run it against `ascent serve` to debug)"
        )
    if failed:
        print(
            f"agent: {len(failed)} of {len(episodes)} episodes failed (counted in "
            f"agent/end/*; reward rollout.agent.failed_reward); first: {failed[0].error}"
        )
