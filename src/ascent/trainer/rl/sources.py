"""Where a step's scored rollouts come from: generated in turn (``trainer.mode`` sync, with
dynamic sampling's refill rounds and ReMax's greedy baselines), generated ahead of training
(one_step_off, async), or replayed from disk (``trainer.replay_rollouts``); any of them may be
dumped (``trainer.dump_rollouts``).

A source has ``collect(step) -> (batch, metrics)``, ``before_sync()`` (called before new
weights go to the generator) and ``save(directory)`` (its part of a checkpoint); sources
with nothing in flight and nothing to save inherit ``Stateless``' no-ops."""

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ascent.algos.group_filter import groups_with_signal
from ascent.batch import Batch
from ascent.controller import WorkerGroup
from ascent.data.rl import PromptStream, prompts_batch
from ascent.rollout.types import rollout_padding
from ascent.trainer.rl.ahead import RolloutsAhead, staleness_metrics, step_seed
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.plan import Plan
from ascent.trainer.rl.timing import StageTimes


class Stateless:
    """A source with nothing in flight when weights change and nothing to checkpoint."""

    def before_sync(self) -> None:
        pass

    def save(self, directory: Path) -> None:
        pass


Observe = Callable[[Batch, torch.Tensor | None], dict[str, float]]


class Scoring:
    """Rewards of generated rows, then what the row kind makes of them (an episode's outcome
    shared by its rows); the scorers' counts and the row kind's metrics go to ``metrics``.
    ``observe`` (the prompt stream's) learns from every scored round, in step order."""

    def __init__(
        self, rewards: Any, rows: Any, times: StageTimes, observe: Observe | None = None
    ) -> None:
        self.rewards, self.rows, self.times, self.observe = rewards, rows, times, observe

    def __call__(self, batch: Batch, metrics: defaultdict) -> Batch:
        metrics.update(self.rows.generated_metrics(batch))
        with self.times("reward"):
            batch, counts = self.rows.score(batch, self.rewards)
            batch = self.rows.after_scoring(batch)
        for key, value in counts.items():
            metrics[key] += value
        if self.observe is not None:  # before any filter: dead groups are evidence too
            metrics.update(self.observe(batch, self.rows.sample_weights(batch)))
        return batch

    def baseline(self, batch: Batch, metrics: defaultdict) -> torch.Tensor:
        """Scores of baseline rows (B,); the scorers' failures on them counted apart as
        ``baseline/reward/errors`` and the like (a failed baseline scores 0 and shifts every
        advantage of its group)."""
        with self.times("reward"):
            scored, counts = self.rewards.score(batch)
        for key, value in counts.items():
            metrics[f"baseline/{key}"] += value
        return scored["scores"]


class InTurn(Stateless):
    """trainer.mode sync: the step's rollouts generated now and scored; with dynamic
    sampling, rounds of fresh prompts until enough groups have signal; with ReMax, each
    prompt's greedy answer scored as its samples' baseline."""

    def __init__(
        self,
        config: RLConfig,
        plan: Plan,
        rollout: WorkerGroup,
        stream: PromptStream,
        scoring: Scoring,
        pad_id: int,
    ) -> None:
        self.config, self.plan, self.rollout, self.stream = config, plan, rollout, stream
        self.scoring, self.pad_id, self.times = scoring, pad_id, scoring.times

    def collect(self, step: int) -> tuple[Batch, dict[str, float]]:
        cfg, metrics = self.config, defaultdict(float)
        rounds = cfg.algorithm.max_generation_rounds if self.plan.dynamic_sampling else 1
        wanted = cfg.data.prompts_per_step * cfg.rollout.samples_per_prompt
        kept = []
        for round_index in range(rounds):
            batch = self._round(step, round_index, metrics)
            if not self.plan.dynamic_sampling:
                return batch, dict(metrics)
            metrics["dynamic_sampling/rounds"] = float(round_index + 1)
            kept.append(batch.index(groups_with_signal(batch["acc"], batch.group_ids("uid"))))
            if sum(len(b) for b in kept) >= wanted:
                break
        batch = Batch.concat(kept, pad=rollout_padding(self.pad_id))
        return self._trimmed(batch, metrics), dict(metrics)

    def _round(self, step: int, round_index: int, metrics: defaultdict) -> Batch:
        taken = self.stream.take(self.config.data.prompts_per_step)
        prompts = prompts_batch(taken, self.pad_id, f"{step + 1}.{round_index}")
        seed = step_seed(self.config.trainer.seed, step, round_index)
        with self.times("gen"):
            batch = self.rollout.generate(prompts, sampling={"seed": seed})
        batch = self.scoring(batch, metrics)
        if self.plan.greedy_baseline:
            batch = batch.assign(baseline_scores=self._greedy_scores(prompts, seed, metrics))
        return batch

    def _greedy_scores(self, prompts: Batch, seed: int, metrics: defaultdict) -> torch.Tensor:
        """ReMax's baselines: the score of one greedy answer per prompt, repeated over the
        prompt's samples (B,)."""
        with self.times("gen"):
            greedy = self.rollout.generate(
                prompts, sampling={"n": 1, "temperature": 0.0, "seed": seed}
            )
        scores = self.scoring.baseline(greedy, metrics)
        return scores.repeat_interleave(self.config.rollout.samples_per_prompt)

    def _trimmed(self, batch: Batch, metrics: defaultdict) -> Batch:
        """Dynamic sampling: whole groups, as many as the step wants and the ranks can split."""
        n, wanted = self.config.rollout.samples_per_prompt, self.config.data.prompts_per_step
        unit = self.config.resources.world_size * self.plan.actor_mini_batches
        groups = min(len(batch) // n, wanted)
        while groups and (groups * n) % unit:
            groups -= 1
        metrics["dynamic_sampling/groups"] = float(groups)
        if groups == 0:
            print(
                "dynamic sampling: no group with signal after the refill rounds; this step "
                "makes no update"
            )
        elif groups < wanted:
            print(f"dynamic sampling: only {groups} group(s) with signal after the refill rounds")
        return batch.index(slice(0, groups * n))


class Ahead:
    """trainer.mode one_step_off / async: the step's rollouts, generated while earlier steps
    trained (``RolloutsAhead``), then scored; their staleness (tokens carry the trainer's
    weight versions; ``weight_version()`` is the current one) and the generator's busy time
    are measured."""

    def __init__(
        self, ahead: RolloutsAhead, scoring: Scoring, weight_version: Callable[[], int]
    ) -> None:
        self.ahead, self.scoring, self.weight_version = ahead, scoring, weight_version

    def collect(self, step: int) -> tuple[Batch, dict[str, float]]:
        self.ahead.fill(step)
        with self.scoring.times("wait_rollouts"):  # the trainer's idle time
            batch = self.ahead.take(step)
        metrics: defaultdict = defaultdict(float)
        if "rollout_weight_versions" in batch:
            versions, mask = batch["rollout_weight_versions"], batch["response_mask"]
            metrics.update(staleness_metrics(versions, mask, self.weight_version()))
        metrics.update(self.ahead.generator_metrics())
        return self.scoring(batch, metrics), dict(metrics)

    def before_sync(self) -> None:
        self.ahead.before_sync()  # one_step_off: what is in flight finishes first

    def save(self, directory: Path) -> None:
        self.ahead.save(directory)  # prompts submitted, not trained: submitted again


class Replay(Stateless):
    """trainer.replay_rollouts: the batches another run dumped, step by step."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def collect(self, step: int) -> tuple[Batch, dict[str, float]]:
        path = self.directory / f"step_{step + 1:08d}"
        if not path.exists():
            raise FileNotFoundError(f"replay: no saved batch for step {step + 1} at {path}")
        return Batch.load(path), {}


class Dumped:
    """Another source's batches, each also saved under ``directory`` (trainer.dump_rollouts)."""

    def __init__(self, source: Any, directory: str) -> None:
        self.source, self.directory = source, Path(directory)

    def collect(self, step: int) -> tuple[Batch, dict[str, float]]:
        batch, metrics = self.source.collect(step)
        batch.save(self.directory / f"step_{step + 1:08d}", overwrite=True)
        return batch, metrics

    def before_sync(self) -> None:
        self.source.before_sync()

    def save(self, directory: Path) -> None:
        self.source.save(directory)


def rollout_source(
    config: RLConfig,
    plan: Plan,
    rollout: WorkerGroup,
    stream: PromptStream,
    scoring: Scoring,
    *,
    pad_id: int,
    weight_version: Callable[[], int],
    total_steps: int,
    start_step: int,
    checkpoint: Path | None,
) -> Any:
    """The source the config asks for, from ``start_step``: generating ahead resubmits what
    the ``checkpoint`` it resumes from had submitted and not trained, and begins at once."""
    cfg = config.trainer
    if cfg.replay_rollouts:
        return Replay(cfg.replay_rollouts)
    if cfg.mode == "sync":
        source = InTurn(config, plan, rollout, stream, scoring, pad_id)
    else:
        fixed = cfg.async_schedule == "fixed"
        ahead = RolloutsAhead(
            rollout,
            stream,
            pad_id=pad_id,
            prompts_per_step=config.data.prompts_per_step,
            total_steps=total_steps,
            seed=cfg.seed,
            max_staleness=1 if cfg.mode == "one_step_off" else cfg.max_staleness,
            in_flight_updates=cfg.mode == "async" and not fixed,
            whole_batches=fixed,
        )
        ahead.start(start_step, checkpoint)
        source = Ahead(ahead, scoring, weight_version)
    return Dumped(source, cfg.dump_rollouts) if cfg.dump_rollouts else source
