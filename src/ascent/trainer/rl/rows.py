"""What a rollout row is: one sampled response (here), or one turn of an agent's episode
(``ascent.agents.rows.EpisodeRows``), or an outside agent's episode
(``ascent.gateway.rows.OutsideRows``). The run asks the row kind, chosen once at start,
instead of testing the batch: how to check prompts, how rows are scored and what scoring
leaves behind, which rows validation reads, how group statistics weigh rows."""

from typing import Any

import torch

from ascent.batch import Batch
from ascent.data.rl import PromptCheck


class SampleRows:
    """Each row is one response to its prompt: nothing to add."""

    def prompt_check(self) -> PromptCheck | None:
        return None

    def generated_metrics(self, batch: Batch) -> dict[str, float]:
        return {}

    def needs_scorer(self, function: str | None) -> bool:
        """Without ``reward.function``, each row's ``data_source`` needs a built-in scorer."""
        return function is None

    def score(self, batch: Batch, rewards: Any) -> tuple[Batch, dict[str, float]]:
        """The run's rewards of each row."""
        return rewards.score(batch)

    def after_scoring(self, batch: Batch) -> Batch:
        return batch

    def score_validation(self, batch: Batch, prompts: int, rewards: Any) -> tuple[Batch, dict]:
        """The scored rows (every sample) of the first ``prompts`` prompts (the rest pad
        the batch to the ranks) and the scorers' failure counts."""
        real = {f"val-{i}" for i in range(prompts)}  # prompts_batch's uids
        rows = [row for row, uid in enumerate(batch["uid"]) if uid in real]
        return self.score(batch.index(rows), rewards)

    def validation_metrics(self, scored: Batch) -> dict[str, float]:
        return {}

    def sample_weights(self, batch: Batch) -> torch.Tensor | None:
        return None


def row_kind(agent: Any | None) -> Any:
    """The rows an RL run's rollouts have: an outside agent's episodes with
    ``rollout.agent.run``, episode turns with ``rollout.agent``, else samples."""
    if agent is None:
        return SampleRows()
    if agent.run is not None:
        from ascent.gateway.rows import OutsideRows  # the gateway loads only for its runs

        return OutsideRows(agent)
    from ascent.agents.rows import EpisodeRows  # agents load only for agent runs

    return EpisodeRows(agent)
