"""A policy loss that turns non-finite on chosen calls: injects the NaN losses that the
trainer must skip, count, and stop on. Named in configs as
``tests.trainer.faulty:poisoned_ppo`` (in-process runs share this module's counter)."""

import itertools

from ascent.algos.losses import ppo
from ascent.algos.types import PolicyLossInputs, TokenLoss

_calls = itertools.count(1)


def reset() -> None:
    global _calls
    _calls = itertools.count(1)


def poisoned_ppo(inputs: PolicyLossInputs, *, poisoned_calls: list[int]) -> TokenLoss:
    """PPO's loss, NaN on every token of the calls numbered in ``poisoned_calls`` (from 1)."""
    loss = ppo(inputs)
    if next(_calls) in poisoned_calls:
        return TokenLoss(per_token=loss.per_token * float("nan"), metrics=loss.metrics)
    return loss
