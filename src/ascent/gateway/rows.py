"""Rows that are an outside agent's episodes, for the RL run (the row kind of
``ascent.trainer.rl.rows``): the in-process loop's episode rows (``EpisodeRows``), scored by
the agent itself.

    score[row] = reward.function's score of the episode's last row (0 without one)
               + the agent's reward for the episode (agent_reward)
               + the rewards it reported for single calls (on their calls' last tokens)

so ``reward.function`` is optional: without one, the agent's reward is the outcome and its
``acc`` (``agent_acc``) the accuracy; with one, the two add, and the function's ``acc`` is the
accuracy. The data's ``data_source`` then needs no built-in scorer.
"""

from typing import Any

import torch

from ascent.agents.rows import EpisodeRows
from ascent.batch import Batch
from ascent.data.rl import PromptCheck
from ascent.rewards.tokens import token_rewards


class OutsideRows(EpisodeRows):
    def prompt_check(self) -> PromptCheck | None:
        """Nothing to check: the agent brings its own tools and environment."""
        return None

    def needs_scorer(self, function: str | None) -> bool:
        """Rows need a scorer for their ``data_source`` only with ``reward.function`` unset
        and no agent to score them: never here."""
        return False

    def score(self, batch: Batch, rewards: Any) -> tuple[Batch, dict[str, float]]:
        """The outcome of each row (see the module docstring), on its last token."""
        if rewards.function.config.function is not None:
            batch, counts = rewards.score(batch)
            base, acc = batch["scores"], batch["acc"]
        else:
            counts = {}
            base, acc = torch.zeros(len(batch)), batch["agent_acc"]
        scores = base + batch["agent_reward"]
        return batch.assign(
            scores=scores, acc=acc, token_rewards=token_rewards(batch, scores)
        ), counts
