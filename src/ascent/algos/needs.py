"""What an advantage estimator needs beyond the rewards, the mask and the groups, declared on
the function itself, so that the trainer starts the roles and stages that produce it and no
others, whether the estimator is built in, registered or named by import path.

    @needs(values=True)
    def my_estimator(inputs: AdvantageInputs) -> Advantages: ...

An estimator without a declaration needs nothing more (``Needs()``).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

F = TypeVar("F", bound=Callable)


@dataclass(frozen=True)
class Needs:
    """The inputs an estimator reads and what the trainer runs to produce each.

    values: ``AdvantageInputs.values``, a critic's V(s_t): the run trains a critic.
    baseline_scores: ``AdvantageInputs.baseline_scores``, the score of a greedy response to
        each prompt: the run generates and scores one per prompt every step, so it cannot
        generate ahead of training (the step's prompts are known only in turn).
    process_rewards: ``AdvantageInputs.process_rewards``, dense token rewards: the run trains
        an implicit PRM, scored against the reference (its log-ratio); it cannot score
        multi-turn episodes yet.
    min_group_size: the samples per prompt the estimator needs (2 for leave-one-out
        baselines), checked against ``rollout.samples_per_prompt`` before any worker starts.
    """

    values: bool = False
    baseline_scores: bool = False
    process_rewards: bool = False
    min_group_size: int = 1


def needs(
    *,
    values: bool = False,
    baseline_scores: bool = False,
    process_rewards: bool = False,
    min_group_size: int = 1,
) -> Callable[[F], F]:
    """Decorator: declare what the estimator needs (see ``Needs``); returns it unchanged."""
    declared = Needs(values, baseline_scores, process_rewards, min_group_size)

    def declare(estimator: F) -> F:
        estimator.needs = declared  # type: ignore[attr-defined]
        return estimator

    return declare


def needs_of(estimator: Callable) -> Needs:
    """What ``estimator`` declared with ``@needs``; nothing beyond the defaults otherwise."""
    declared = getattr(estimator, "needs", Needs())
    if not isinstance(declared, Needs):
        name = getattr(estimator, "__name__", estimator)
        raise TypeError(
            f"advantage estimator {name}: its 'needs' attribute is a {type(declared).__name__}, "
            "not ascent.algos.Needs; declare it with @ascent.algos.needs(...)"
        )
    return declared
