"""Rollouts generated ahead of training (``trainer.mode`` one_step_off and async).

Which prompts a step trains on never depends on timing: the producer takes prompts from the
stream in step order, ``prompts_per_step`` at a time, and step t trains on exactly the prompts
submitted for step t, whenever their samples come back. Only which weights sampled them
depends on timing, and that is bounded:

    weight version v = updates applied so far (the trainer trains step t at version t);
    step t's prompts are submitted only once t - k steps are trained (the rollout then
    holds version t - k), so every token trained at step t was sampled by a version in
    [t - k, t].

one_step_off is k = 1 with weights changed only between batches: after step t's update the
producer waits for step t+1's samples, then loads the new weights, then submits step t+2
(step t+1 is sampled entirely by version t, staleness exactly 1). async loads every update
into the running engine at once (responses in flight go on under it, or restart, per
``trainer.partial_rollouts``) and runs up to k steps ahead.

``trainer.async_schedule=fixed`` takes timing out altogether: weights change only between
batches, as in one_step_off, for any k (after step t's update the producer waits for every
step submitted, then loads version t+1, then submits step t+1+k: step s is sampled wholly by
version max(0, s - k)); and each step's prompts go to the engine as one batch, admitted
together before its first decode step (``RolloutBackend.generate_together``), so which rows
share a decode step never depends on when requests arrived. Two runs with one seed then train
on the same samples. With ``rollout.agent`` what is fixed is the weight schedule: each step's
episodes are sampled wholly by version max(0, s - k), but their turns (an outside agent's
calls) join the engine's batch as they come, so their samples are not bit-reproducible. The
price: the engine waits for the trainer between batches, so k > 1
buys no more overlap than k = 1 once the run is steady.

A checkpoint keeps the prompts of every step submitted and not yet trained (in flight or
finished); a resumed run submits them again, with the same per-step seeds, before taking new
prompts from the stream (whose saved position is after them). So the steps after a crash
train on the same prompts as they would have without it, none lost, none twice; only their
samples are drawn anew (by the restored weights).
"""

from pathlib import Path

import torch

from ascent.batch import Batch
from ascent.controller import WorkerGroup
from ascent.data.rl import PromptStream, prompts_batch

AHEAD_DIR = "rollouts_ahead"  # in a checkpoint: one prompt batch per submitted step


def step_seed(run_seed: int, step: int, round_index: int = 0) -> int:
    """The sampling seed of a step's generation (the same in every mode)."""
    return run_seed * 1_000_003 + step * 101 + round_index


class RolloutsAhead:
    """The producer side: submits steps' prompts as the staleness bound allows, hands each
    step its rollouts, and saves / restores what is submitted and not trained."""

    def __init__(
        self,
        rollout: WorkerGroup,
        stream: PromptStream,
        *,
        pad_id: int,
        prompts_per_step: int,
        total_steps: int,
        seed: int,
        max_staleness: int,
        in_flight_updates: bool,
        whole_batches: bool = False,
    ) -> None:
        self.rollout, self.stream, self.pad_id = rollout, stream, pad_id
        self.prompts_per_step, self.total_steps, self.seed = prompts_per_step, total_steps, seed
        self.max_staleness, self.in_flight_updates = max_staleness, in_flight_updates
        self.whole_batches = whole_batches  # each step's prompts admitted together
        self.prompts: dict[int, Batch] = {}  # step -> its prompts (submitted, not trained)
        self.finished: dict[int, Batch] = {}  # step -> its rollouts (taken early)
        self.next_step = 0  # the next step whose prompts come from the stream
        self._busy_s = 0.0  # the generator's busy seconds at the last step taken

    def start(self, step: int, saved: Path | None = None) -> None:
        """Begin at ``step``: submit again the steps a checkpoint saved (``saved``: its
        directory), before any new prompt is taken from the stream."""
        self.next_step = step
        if saved is not None and (saved / AHEAD_DIR).is_dir():
            for directory in sorted((saved / AHEAD_DIR).iterdir()):
                submitted = int(directory.name.removeprefix("step_"))
                self._submit(submitted, Batch.load(directory))
                self.next_step = max(self.next_step, submitted + 1)

    def fill(self, done: int) -> None:
        """Submit every step the bound allows once ``done`` steps are trained: up to step
        done + k (the weights then are version ``done`` or, with steps that did not update
        the actor, older ones: lag in versions never exceeds lag in steps)."""
        while self.next_step <= done + self.max_staleness and self.next_step < self.total_steps:
            step = self.next_step
            taken = self.stream.take(self.prompts_per_step)
            self._submit(step, prompts_batch(taken, self.pad_id, f"{step + 1}.0"))
            self.next_step += 1

    def _submit(self, step: int, prompts: Batch) -> None:
        self.rollout.start_rollouts(
            prompts,
            tag=_tag(step),
            sampling={"seed": step_seed(self.seed, step)},
            together=self.whole_batches,
        )
        self.prompts[step] = prompts

    def take(self, step: int) -> Batch:
        """Step ``step``'s rollouts, waiting for them if need be."""
        if step not in self.prompts:
            raise RuntimeError(f"step {step}'s prompts were not submitted (next {self.next_step})")
        del self.prompts[step]
        if step in self.finished:
            return self.finished.pop(step)
        return self.rollout.take_rollouts(_tag(step))

    def generator_metrics(self) -> dict[str, float]:
        """The generator's busy seconds since the last call (the rest of the step it waited
        for prompts) and the responses restarted so far (partial_rollouts=false)."""
        counters = self.rollout.background_counters()
        busy, self._busy_s = counters["busy_s"] - self._busy_s, counters["busy_s"]
        return {"async/generation_busy_s": busy, "async/restarted_total": counters["restarted"]}

    def before_sync(self) -> None:
        """Without in-flight updates (one_step_off, a fixed schedule): the samples in flight
        finish under the weights they began with."""
        if not self.in_flight_updates:
            for step in sorted(set(self.prompts) - set(self.finished)):
                self.finished[step] = self.rollout.take_rollouts(_tag(step))

    def save(self, directory: Path) -> None:
        """The prompts of every step submitted and not trained, to be submitted again."""
        for step, prompts in self.prompts.items():
            prompts.save(directory / AHEAD_DIR / f"step_{step:08d}")


def _tag(step: int) -> str:
    return f"step-{step}"


def staleness_metrics(versions: torch.Tensor, mask: torch.Tensor, current: int) -> dict:
    """How many updates old the weights that sampled the step's tokens were: mean and max
    over response tokens, and the share of responses whose tokens span several versions."""
    valid = mask.bool()
    if not valid.any():
        return {
            "async/staleness_mean": 0.0,
            "async/staleness_max": 0.0,
            "async/mixed_version_frac": 0.0,
        }
    lag = (current - versions).float()
    big = torch.iinfo(versions.dtype).max
    newest = versions.masked_fill(~valid, -big).amax(dim=-1)
    oldest = versions.masked_fill(~valid, big).amin(dim=-1)
    return {
        "async/staleness_mean": float(lag[valid].mean()),
        "async/staleness_max": float(lag[valid].max()),
        "async/mixed_version_frac": float((newest > oldest).float().mean()),
    }
