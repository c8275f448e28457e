"""DAPO's dynamic-sampling group filter (arXiv:2503.14476).

A group (the samples of one prompt) whose metric - raw accuracy, not the shaped reward - has
zero variance (all right or all wrong) gives zero advantage under group baselines and only
dilutes the batch. Such groups are dropped; the trainer refills the step with new prompts.
Singleton groups are kept, as in verl (a variance over one sample is undefined; with
``samples_per_prompt=1`` dropping them would leave nothing to train on).
"""

from torch import Tensor

from ascent.algos.groups import group_stats


def groups_with_signal(metric: Tensor, group_ids: Tensor) -> Tensor:
    """(B,) bool: True for samples whose group's ``metric`` varies (or is a singleton)."""
    stats = group_stats(metric.double(), group_ids)
    return (stats.std > 0) | (stats.count == 1)
