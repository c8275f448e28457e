"""Rows that are turns of agent episodes, for the RL run (the row kind of
``ascent.trainer.rl.rows``): a sample per contiguous stretch of one episode's tokens, so an
episode has one row or, where templates drifted, several; the episode's outcome is all of
them."""

from typing import Any

import torch

from ascent.agents.config import AgentConfig
from ascent.agents.episodes import (
    agent_metrics,
    agent_prompt_check,
    episode_outcomes,
    episode_weights,
    last_rows,
)
from ascent.batch import Batch
from ascent.data.rl import PromptCheck


class EpisodeRows:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    def prompt_check(self) -> PromptCheck | None:
        """Refuses at load a prompt whose environment or tools the agent cannot build."""
        return agent_prompt_check(self.config)

    def generated_metrics(self, batch: Batch) -> dict[str, float]:
        """Turns, tool calls and errors, how episodes ended (``agent/*``)."""
        return agent_metrics(batch)

    def needs_scorer(self, function: str | None) -> bool:
        """Without ``reward.function``, each row's ``data_source`` needs a built-in scorer."""
        return function is None

    def score(self, batch: Batch, rewards: Any) -> tuple[Batch, dict[str, float]]:
        """The run's rewards of each row (an episode's outcome is its last row's)."""
        return rewards.score(batch)

    def after_scoring(self, batch: Batch) -> Batch:
        """An episode's outcome (its last row's score, plus the environment's rewards) is
        all its rows'."""
        return episode_outcomes(batch)

    def score_validation(self, batch: Batch, prompts: int, rewards: Any) -> tuple[Batch, dict]:
        """Each episode of the first ``prompts`` prompts, by its last row (which holds the
        final answer), after the whole batch is scored: rows per prompt vary."""
        batch, failures = self.score(batch, rewards)
        batch = episode_outcomes(batch)
        real = {f"val-{i}" for i in range(prompts)}
        rows = sorted(row for (uid, _), row in last_rows(batch).items() if uid in real)
        return batch.index(rows), failures

    def validation_metrics(self, scored: Batch) -> dict[str, float]:
        return {f"val/{key}": value for key, value in agent_metrics(scored).items()}

    def sample_weights(self, batch: Batch) -> torch.Tensor:
        """1/k for each of an episode's k rows: group statistics count each episode once."""
        return episode_weights(batch)
