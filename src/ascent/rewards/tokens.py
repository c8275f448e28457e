"""Where rewards sit on a response's tokens: the one place that turns sequence scores and
per-turn rewards into the ``token_rewards`` every advantage estimator reads."""

from collections.abc import Sequence

import torch

from ascent.batch import Batch
from ascent.rollout.types import response_lengths


def token_rewards(
    batch: Batch,
    scores: torch.Tensor,
    turn_rewards: Sequence[Sequence[tuple[int, float]]] | None = None,
) -> torch.Tensor:
    """(B, R) float32 rewards on the response tokens of a rollout batch (R: the width of
    ``responses``): row b's ``scores[b]`` on its last response token (the first, for an
    empty response), plus, for an agent episode, each ``(position, reward)`` of
    ``turn_rewards[b]`` at that position (a turn's reward on its last sampled token)."""
    rewards = torch.zeros(batch["responses"].shape, dtype=torch.float32)
    last = response_lengths(batch).clamp(min=1) - 1
    rewards[torch.arange(len(batch)), last] = scores.float()
    for row, turns in enumerate(turn_rewards or []):
        for position, reward in turns:
            rewards[row, position] += reward
    return rewards
