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
from ascent.trainer.run_dir import CannotStart, start_run
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
    cfg = config.trainer
    check_local_capacity(config)  # before a local Ray would wait minutes for it
    dp = config.resources.world_size
    if cfg.batch_size % dp:
        raise CannotStart(
            f"trainer.batch_size={cfg.batch_size} must be a multiple of the {dp} ranks"
        )
    steps_per_epoch = len(train) // cfg.batch_size
    if steps_per_epoch == 0:
        raise CannotStart(
            f"trainer.batch_size={cfg.batch_size} is more than the {len(train)} usable "
            "examples of data.train_files: no step could be made; lower trainer.batch_size "
            "or add data"
        )
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = Checkpoints(run_dir, keep_last=cfg.keep_last, checksums=cfg.checksum_checkpoints)
    begin = start_run(run_dir, checkpoints, cfg.resume)  # before anything is written
    dump_config(config, run_dir / "config.yaml")
    total_steps = steps_per_epoch * cfg.epochs
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    group = spawn_group(
        task.worker,
        config.resources.pool(),
        role=task.role,
        args=(task.worker_config,),
        backend=config.resources.backend,
        ray_address=config.resources.ray_address,
        seed=cfg.seed,
        deterministic=cfg.deterministic,
    )
    start = begin.step
    tracker = Tracker(
        run_dir,
        config.tracking,
        config.model_dump(mode="json"),
        console_keys=task.console,
        resume_step=begin.records_up_to,
        run_ids=begin.state.get("tracking"),
    )
    if begin.checkpoint is not None:
        group.load_checkpoint(str(begin.checkpoint / task.role))
        restore_rng(begin.checkpoint, {task.role: group})
        print(f"resumed from {begin.checkpoint} at step {start}")

    def validate() -> dict[str, float]:
        sums: Counter = Counter()
        for first in range(0, len(val), cfg.val_batch_size):
            chunk = val[first : first + cfg.val_batch_size]
            chunk = chunk + [task.padding(chunk[0])] * (-len(chunk) % dp)
            sums.update(group.eval_sums(for_ranks(task.collate(chunk), dp))[0])
        return task.val_metrics(dict(sums))

    def save(step: int) -> None:
        def write_parts(directory: Path) -> None:
            group.save_checkpoint(str(directory / task.role), cfg.save_optimizer)
            save_run_parts(directory, {task.role: group}, run_dir, config.model, tokenizer)

        if step != start:  # a run resumed at its last step has nothing new to save
            checkpoints.save(step, write_parts, {"tracking": tracker.run_ids()})

    result: dict = {"run_dir": str(run_dir), "validation": [], "steps": start, "stopped": None}
    desc = task.role
    progress = tqdm(total=total_steps, initial=start, disable=not cfg.progress_bar, desc=desc)
    done = start
    with StopRequest() as stop:  # SIGTERM / SIGINT: finish the step, save, return
        try:
            if start == 0 and val and cfg.val_every:
                result["validation"].append((0, validate()))
                tracker.log(result["validation"][-1][1], 0, printer=tqdm.write)
            for step in range(start, total_steps):
                epoch, offset = divmod(step, steps_per_epoch)
                order = epoch_order(len(train), epoch, cfg.seed)
                rows = order[offset * cfg.batch_size : (offset + 1) * cfg.batch_size]
                batch = for_ranks(task.collate([train[i] for i in rows]), dp)
                began = time.perf_counter()
                metrics = group.train_step(batch)[0]
                seconds = time.perf_counter() - began
                metrics |= {
                    "timing_s/step": seconds,
                    "perf/throughput": float(batch["attention_mask"].sum()) / seconds,
                }
                done = step + 1
                if val and cfg.val_every and (done % cfg.val_every == 0 or done == total_steps):
                    result["validation"].append((done, validate()))
                    metrics |= result["validation"][-1][1]
                tracker.log(metrics, done, printer=tqdm.write)
                progress.update(1)
                progress.set_postfix(loss=f"{metrics[f'{task.role}/loss']:.4f}")
                result["train_metrics"] = metrics
                if stop.signal is not None:
                    break
                if cfg.save_every and done % cfg.save_every == 0 and done < total_steps:
                    save(done)
            save(done)
            result["steps"] = done
            result["stopped"] = stop.signal.name if stop.signal is not None else None
            if cfg.export and stop.signal is None:
                group.export(str(run_dir / "hf"))
                result["export_dir"] = str(run_dir / "hf")
        finally:
            progress.close()
            tracker.close()
            group.shutdown()
    return result
