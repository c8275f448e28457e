"""The loop of the supervised trainers (``ascent sft``, ``ascent rm``): examples in seeded
epochs, one optimiser step per batch, validation, checkpoints, resume, export.

Per step: the next ``batch_size`` examples of this epoch's shuffled order, collated into a
batch, arranged over the data-parallel ranks, one ``train_step`` on the worker group;
validation every ``val_every`` steps; checkpoints every ``save_every`` steps and at the end;
finally the model is exported as a transformers checkpoint. The data position is a function
of the step (seeded shuffles), so resuming continues with exactly the examples that were
next. What differs between trainers (the worker, how examples become a batch, what
validation reports) is a ``SupervisedTask``.
"""

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ascent.batch import Batch
from ascent.config import dump_config
from ascent.controller import spawn_group
from ascent.trainer.capacity import check_local_capacity
from ascent.trainer.checkpoint_parts import restore_rng, save_run_parts
from ascent.trainer.checkpoints import Checkpoints
from ascent.trainer.dp_order import for_ranks
from ascent.trainer.faults import StopRequest
from ascent.trainer.run_dir import CannotStart, make_run_dir, start_run
from ascent.trainer.tracking import Tracker


@dataclass(frozen=True)
class SupervisedTask:
    """role: the worker group's name (checkpoint folder, metric prefix ``<role>/``).
    worker, worker_config: the group's class and its config; it has ``train_step(batch)``,
    ``eval_sums(batch) -> dict`` (sums over the batch on all ranks) and the engine's
    checkpoint and export methods.
    collate: examples -> batch. padding: an example that weighs nothing (validation chunks
    are padded with it to a multiple of the ranks). val_metrics: the summed ``eval_sums`` of
    the validation set -> ``val/*`` metrics. console: the metric keys printed per step."""

    role: str
    worker: type
    worker_config: Any
    collate: Callable[[list], Batch]
    padding: Callable[[Any], Any]
    val_metrics: Callable[[dict[str, float]], dict[str, float]]
    console: list[str]


def epoch_order(size: int, epoch: int, seed: int) -> list[int]:
    order = list(range(size))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def run_supervised(
    config: Any, tokenizer: Any, task: SupervisedTask, train: list, val: list
) -> dict:
    """Train ``task`` on ``train`` and validate on ``val``; ``config`` has ``model``,
    ``trainer`` (SFTTrainerSettings), ``resources`` and ``tracking``. Returns the run
    directory, the validation history [(step, val metrics)], the last step's metrics, the
    steps done, the stopping signal (or None) and the export directory."""
    return SupervisedRun(config, tokenizer, task, train, val).run()


def batches_per_epoch(batch_size: int, dp: int, examples: int) -> int:
    """The full batches in one epoch; a ``CannotStart`` when no step could be made or a batch
    does not split evenly over the ``dp`` ranks."""
    if batch_size % dp:
        raise CannotStart(f"trainer.batch_size={batch_size} must be a multiple of the {dp} ranks")
    batches = examples // batch_size
    if batches == 0:
        raise CannotStart(
            f"trainer.batch_size={batch_size} is more than the {examples} usable "
            "examples of data.train_files: no step could be made; lower trainer.batch_size "
            "or add data"
        )
    return batches


class SupervisedRun:
    """One run of the loop. Constructing it starts the run: the checks that need nothing
    written, the run directory (claimed, config written), the tracker, the worker group, and
    the resumed checkpoint if there is one; ``run`` then trains, saves and exports."""

    def __init__(
        self, config: Any, tokenizer: Any, task: SupervisedTask, train: list, val: list
    ) -> None:
        self.config, self.tokenizer, self.task = config, tokenizer, task
        self.train, self.val = train, val
        self.cfg = cfg = config.trainer
        check_local_capacity(config)  # before a local Ray would wait minutes for it
        self.dp = config.resources.world_size
        self.steps_per_epoch = batches_per_epoch(cfg.batch_size, self.dp, len(train))
        self.run_dir = make_run_dir(cfg.run_dir)
        self.checkpoints = Checkpoints(
            self.run_dir, keep_last=cfg.keep_last, checksums=cfg.checksum_checkpoints
        )
        begin = start_run(self.run_dir, self.checkpoints, cfg.resume)  # before anything is written
        dump_config(config, self.run_dir / "config.yaml")
        self.total_steps = self.steps_per_epoch * cfg.epochs
        if cfg.max_steps is not None:
            self.total_steps = min(self.total_steps, cfg.max_steps)
        # Tracking that cannot start stops the run here, before a worker loads the model.
        self.tracker = Tracker(
            self.run_dir,
            config.tracking,
            config.model_dump(mode="json"),
            console_keys=task.console,
            resume_step=begin.records_up_to,
            run_ids=begin.state.get("tracking"),
        )
        try:  # a start that fails leaves no tracker's run open (an MLflow run RUNNING)
            self.group = spawn_group(
                task.worker,
                config.resources.pool(),
                role=task.role,
                args=(task.worker_config,),
                backend=config.resources.backend,
                ray_address=config.resources.ray_address,
                seed=cfg.seed,
                deterministic=cfg.deterministic,
            )
        except BaseException:
            self.tracker.close()
            raise
        self.start = begin.step
        if begin.checkpoint is not None:
            self.group.load_checkpoint(str(begin.checkpoint / task.role))
            restore_rng(begin.checkpoint, {task.role: self.group})
            print(f"resumed from {begin.checkpoint} at step {self.start}")

    def run(self) -> dict:
        """The steps, the last checkpoint and the export; the progress bar, tracker and
        worker group are closed however it ends."""
        result: dict = {
            "run_dir": str(self.run_dir),
            "validation": [],
            "steps": self.start,
            "stopped": None,
        }
        progress = tqdm(
            total=self.total_steps,
            initial=self.start,
            disable=not self.cfg.progress_bar,
            desc=self.task.role,
        )
        with StopRequest() as stop:  # SIGTERM / SIGINT: finish the step, save, return
            try:
                done = self.steps(result, stop, progress)
                self.finish(result, stop, done)
            finally:
                progress.close()
                self.tracker.close()
                self.group.shutdown()
        return result

    def steps(self, result: dict, stop: StopRequest, progress: tqdm) -> int:
        """Validation at step 0 of a fresh run, then the steps from ``start``, each logged
        (with validation when due) before any checkpoint of it; returns the steps done,
        fewer than ``total_steps`` when a signal came."""
        cfg, done = self.cfg, self.start
        if self.start == 0 and self.val and cfg.val_every:
            result["validation"].append((0, self.validate()))
            self.tracker.log(result["validation"][-1][1], 0, printer=tqdm.write)
        for step in range(self.start, self.total_steps):
            metrics = self.train_step(step)
            done = step + 1
            if self.validation_due(done):
                result["validation"].append((done, self.validate()))
                metrics |= result["validation"][-1][1]
            self.tracker.log(metrics, done, printer=tqdm.write)
            progress.update(1)
            progress.set_postfix(loss=f"{metrics[f'{self.task.role}/loss']:.4f}")
            result["train_metrics"] = metrics
            if stop.signal is not None:
                break
            if cfg.save_every and done % cfg.save_every == 0 and done < self.total_steps:
                self.save(done)
        return done

    def train_step(self, step: int) -> dict[str, float]:
        """One optimiser step on the batch of ``step``: the next ``batch_size`` examples of
        its epoch's seeded order, so a resumed run sees exactly the examples that were next."""
        epoch, offset = divmod(step, self.steps_per_epoch)
        order = epoch_order(len(self.train), epoch, self.cfg.seed)
        rows = order[offset * self.cfg.batch_size : (offset + 1) * self.cfg.batch_size]
        batch = for_ranks(self.task.collate([self.train[i] for i in rows]), self.dp)
        began = time.perf_counter()
        metrics = self.group.train_step(batch)[0]
        seconds = time.perf_counter() - began
        metrics |= {
            "timing_s/step": seconds,
            "perf/throughput": float(batch["attention_mask"].sum()) / seconds,
        }
        return metrics

    def validation_due(self, done: int) -> bool:
        """Every ``val_every`` steps and after the last, when there is a validation set."""
        cfg = self.cfg
        return bool(
            self.val and cfg.val_every and (done % cfg.val_every == 0 or done == self.total_steps)
        )

    def validate(self) -> dict[str, float]:
        """The ``val/*`` metrics over the whole validation set, in chunks padded to a
        multiple of the ranks with examples that weigh nothing."""
        sums: Counter = Counter()
        size, dp = self.cfg.val_batch_size, self.dp
        for first in range(0, len(self.val), size):
            chunk = self.val[first : first + size]
            chunk = chunk + [self.task.padding(chunk[0])] * (-len(chunk) % dp)
            sums.update(self.group.eval_sums(for_ranks(self.task.collate(chunk), dp))[0])
        return self.task.val_metrics(dict(sums))

    def save(self, step: int) -> None:
        """A checkpoint of ``step``: the group's state (optimiser included if configured),
        the run's parts (RNG states, config, model files) and the tracker's run ids."""
        role, group = self.task.role, self.group

        def write_parts(directory: Path) -> None:
            group.save_checkpoint(str(directory / role), self.cfg.save_optimizer)
            save_run_parts(
                directory, {role: group}, self.run_dir, self.config.model, self.tokenizer
            )

        if step != self.start:  # a run resumed at its last step has nothing new to save
            self.checkpoints.save(step, write_parts, {"tracking": self.tracker.run_ids()})

    def finish(self, result: dict, stop: StopRequest, done: int) -> None:
        """The last checkpoint, then the export unless a signal stopped the run."""
        self.save(done)
        result["steps"] = done
        result["stopped"] = stop.signal.name if stop.signal is not None else None
        if self.cfg.export and stop.signal is None:
            self.group.export(str(self.run_dir / "hf"))
            result["export_dir"] = str(self.run_dir / "hf")
