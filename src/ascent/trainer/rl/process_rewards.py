"""PRIME's step on the driver: the implicit PRM learns from the step's outcome labels and
scores the step's responses token by token (``ascent.algos.implicit_prm``); the advantage
stage then reads ``process_rewards`` (``ascent.algos.advantages.prime``).

Labels are the outcome accuracies ``acc`` (B,) clamped to [0, 1]: what the function reward
calls correct. With ``implicit_prm.update=before`` (the default) the PRM trains on the
step's rollouts and then scores them; with ``after`` it scores first.

Logged, to show whether the process rewards carry signal: ``prm/*`` from its update (loss;
accuracy, the share of responses whose summed reward has the label's sign, measured before
the update's step, so on responses the PRM has not learned from), the token rewards'
distribution ``prime/token_reward/*``, the mean summed reward of correct and of incorrect
responses ``prime/sequence_reward/{correct,incorrect}``, and ``prime/pairwise_accuracy``:
over the pairs of a correct and an incorrect response to the same prompt, the share whose
correct one has the larger summed reward (a tie counts 1/2), as the advantage sees them.
"""

from torch import Tensor

from ascent.algos.groups import group_table
from ascent.algos.implicit_prm import implicit_process_rewards
from ascent.batch import Batch
from ascent.controller import WorkerGroup
from ascent.trainer.dp_order import for_ranks
from ascent.trainer.rl.advantage import distribution
from ascent.trainer.rl.config import ImplicitPRMSettings


def implicit_prm_step(
    prm: WorkerGroup, batch: Batch, settings: ImplicitPRMSettings, mini_batches: int
) -> tuple[Batch, dict[str, float]]:
    """``batch`` (with ``ref_log_probs``) plus ``process_rewards`` (B, R); the metrics."""
    labels = batch["acc"].float().clamp(0.0, 1.0)
    batch = batch.assign(prm_labels=labels)
    metrics: dict[str, float] = {}

    def update() -> None:
        metrics.update(prm.update(for_ranks(batch, prm.dp_size, mini_batches))[0])

    if settings.update == "before":
        update()
    log_probs = prm.log_probs(batch)["prm_log_probs"]
    if settings.update == "after":
        update()
    mask = batch["response_mask"].bool()
    rewards = implicit_process_rewards(log_probs, batch["ref_log_probs"], mask, settings.beta)
    metrics |= distribution("prime/token_reward", rewards[mask])
    sums = rewards.sum(-1)
    for name, rows in (("correct", labels > 0.5), ("incorrect", labels <= 0.5)):
        if bool(rows.any()):
            metrics[f"prime/sequence_reward/{name}"] = float(sums[rows].mean())
    ordered = pairwise_accuracy(sums, labels > 0.5, batch.group_ids("uid"))
    if ordered is not None:
        metrics["prime/pairwise_accuracy"] = ordered
    return batch.assign(process_rewards=rewards), metrics


def pairwise_accuracy(rewards: Tensor, correct: Tensor, group_ids: Tensor) -> float | None:
    """Over the (correct, incorrect) pairs within each group: the share where the correct
    one's reward is larger (ties 1/2); None when no group has both."""
    layout = group_table(group_ids)
    table, right = layout.table(rewards), layout.table(correct) & layout.valid
    wrong = layout.valid & ~right
    pairs = right.unsqueeze(2) & wrong.unsqueeze(1)  # [g, i, j]: i right, j wrong
    if not bool(pairs.any()):
        return None
    gap = table.unsqueeze(2) - table.unsqueeze(1)
    wins = (gap > 0).float() + 0.5 * (gap == 0).float()
    return float(wins[pairs].mean())
