"""The SFT trainer: ``ascent sft CONFIG key=value ...``.

Per step: the next ``batch_size`` examples of this epoch's shuffled order, padded into a
batch, arranged over the data-parallel ranks, one optimiser step; validation loss every
``val_every`` steps; checkpoints every ``save_every`` steps and at the end, in the format the
RL trainer resumes from; finally the model is exported as a transformers checkpoint.
The data position is a function of the step (seeded shuffles), so resuming continues with
exactly the examples that were next.
"""

import math
import random
import time
from pathlib import Path

import torch
from pydantic import Field
from tqdm import tqdm

from ascent.batch import Batch
from ascent.config import dump_config
from ascent.controller import spawn_group
from ascent.data.sft import SFTDataConfig, SFTExample, load_sft_examples
from ascent.engine import FSDPConfig, ModelConfig, OptimConfig
from ascent.engine.config import Strict
from ascent.models.loading import load_tokenizer
from ascent.trainer.capacity import check_local_capacity
from ascent.trainer.checkpoint_parts import restore_rng, save_run_parts
from ascent.trainer.checkpoints import Checkpoints
from ascent.trainer.dp_order import for_ranks
from ascent.trainer.faults import StopRequest
from ascent.trainer.run_dir import CannotStart, start_run
from ascent.trainer.settings import ResourcesConfig, RunSettings
from ascent.trainer.tracking import Tracker, TrackingConfig
from ascent.workers.sft import SFTWorker, SFTWorkerConfig


class SFTTrainerSettings(RunSettings):
    """The loop: batch size, length, evaluation, checkpoints."""

    run_dir: str = Field("runs/sft", description="Where checkpoints, metrics and the export go.")
    batch_size: int = Field(32, ge=1, description="Examples per optimiser step (all ranks).")
    epochs: int = Field(1, ge=1, description="Passes over the training data.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many steps.")
    tokens_per_micro_batch: int = Field(8192, ge=1, description="Token budget per forward.")
    val_every: int = Field(50, ge=0, description="Validation loss every N steps (0: never).")
    val_batch_size: int = Field(64, ge=1, description="Examples per validation batch.")


class SFTConfig(Strict):
    """Supervised fine-tuning, the whole run."""

    model: ModelConfig = Field(description="The model to fine-tune (ModelConfig).")
    data: SFTDataConfig = Field(description="Training and validation data (SFTDataConfig).")
    optim: OptimConfig = Field(OptimConfig(lr=1e-5), description="Optimiser (OptimConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    trainer: SFTTrainerSettings = Field(SFTTrainerSettings(), description="The loop.")
    resources: ResourcesConfig = Field(ResourcesConfig(), description="Devices (ResourcesConfig).")
    tracking: TrackingConfig = Field(TrackingConfig(), description="Metric sinks (TrackingConfig).")


def collate(examples: list[SFTExample], pad_id: int) -> Batch:
    """Right-padded (B, L) input_ids, attention_mask and loss_mask."""
    width = max(len(e.input_ids) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    attention = torch.zeros(len(examples), width, dtype=torch.long)
    loss = torch.zeros(len(examples), width, dtype=torch.long)
    for row, example in enumerate(examples):
        n = len(example.input_ids)
        ids[row, :n] = torch.tensor(example.input_ids)
        attention[row, :n] = 1
        loss[row, :n] = torch.tensor(example.loss_mask)
    return Batch.from_dict({"input_ids": ids, "attention_mask": attention, "loss_mask": loss})


def epoch_order(size: int, epoch: int, seed: int) -> list[int]:
    order = list(range(size))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def train_sft(config: SFTConfig) -> dict:
    """Run SFT; returns the validation losses, the final train loss and where things went."""
    cfg = config.trainer
    check_local_capacity(config)  # before a local Ray would wait minutes for it
    dp = config.resources.world_size
    if cfg.batch_size % dp:
        raise CannotStart(
            f"trainer.batch_size={cfg.batch_size} must be a multiple of the {dp} ranks"
        )

    tokenizer = load_tokenizer(config.model.path, trust_remote_code=config.model.trust_remote_code)
    train_examples, counts = load_sft_examples(config.data.train_files, tokenizer, config.data)
    val_examples, val_counts = load_sft_examples(config.data.val_files, tokenizer, config.data)
    print(f"sft data: train {dict(counts)}; validation {dict(val_counts)}")
    steps_per_epoch = len(train_examples) // cfg.batch_size
    if steps_per_epoch == 0:
        raise CannotStart(
            f"trainer.batch_size={cfg.batch_size} is more than the {len(train_examples)} "
            f"usable examples of data.train_files ({dict(counts)}): no step could be made; "
            "lower trainer.batch_size or add data"
        )
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoints = Checkpoints(run_dir, keep_last=cfg.keep_last, checksums=cfg.checksum_checkpoints)
    begin = start_run(run_dir, checkpoints, cfg.resume)  # before anything is written
    dump_config(config, run_dir / "config.yaml")
    total_steps = steps_per_epoch * cfg.epochs
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    worker_config = SFTWorkerConfig(
        model=config.model,
        optim=config.optim,
        fsdp=config.fsdp,
        tokens_per_micro_batch=cfg.tokens_per_micro_batch,
    )
    group = spawn_group(
        SFTWorker,
        config.resources.pool(),
        role="sft",
        args=(worker_config,),
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
        console_keys=["sft/loss", "sft/grad_norm", "sft/lr", "val/loss", "timing_s/step"],
        resume_step=begin.records_up_to,
        run_ids=begin.state.get("tracking"),
    )
    if begin.checkpoint is not None:
        group.load_checkpoint(str(begin.checkpoint / "sft"))
        restore_rng(begin.checkpoint, {"sft": group})
        print(f"resumed from {begin.checkpoint} at step {start}")

    def validate() -> float:
        if not val_examples:
            return math.nan
        total, tokens = 0.0, 0.0
        for first in range(0, len(val_examples), cfg.val_batch_size):
            chunk = val_examples[first : first + cfg.val_batch_size]
            # Pad the chunk to a multiple of the ranks with loss-free copies.
            chunk = chunk + [SFTExample(chunk[0].input_ids, [0] * len(chunk[0].input_ids))] * (
                -len(chunk) % dp
            )
            result = group.eval_loss(for_ranks(collate(chunk, pad_id), dp))[0]
            total += result["loss"] * result["tokens"]
            tokens += result["tokens"]
        return total / max(tokens, 1.0)

    def save(step: int) -> None:
        def write_parts(directory: Path) -> None:
            group.save_checkpoint(str(directory / "sft"), cfg.save_optimizer)
            save_run_parts(directory, {"sft": group}, run_dir, config.model, tokenizer)

        if step != start:  # a run resumed at its last step has nothing new to save
            checkpoints.save(step, write_parts, {"tracking": tracker.run_ids()})

    result: dict = {"run_dir": str(run_dir), "val_loss": [], "steps": start, "stopped": None}
    progress = tqdm(total=total_steps, initial=start, disable=not cfg.progress_bar, desc="sft")
    done = start
    with StopRequest() as stop:  # SIGTERM / SIGINT: finish the step, save, return
        try:
            if start == 0 and val_examples and cfg.val_every:
                result["val_loss"].append((0, validate()))
                tracker.log({"val/loss": result["val_loss"][-1][1]}, 0, printer=tqdm.write)
            for step in range(start, total_steps):
                epoch, offset = divmod(step, steps_per_epoch)
                order = epoch_order(len(train_examples), epoch, cfg.seed)
                rows = order[offset * cfg.batch_size : (offset + 1) * cfg.batch_size]
                batch = for_ranks(collate([train_examples[i] for i in rows], pad_id), dp)
                began = time.perf_counter()
                metrics = group.train_step(batch)[0]
                seconds = time.perf_counter() - began
                metrics |= {
                    "timing_s/step": seconds,
                    "perf/throughput": float(batch["attention_mask"].sum()) / seconds,
                }
                done = step + 1
                if cfg.val_every and (done % cfg.val_every == 0 or done == total_steps):
                    result["val_loss"].append((done, validate()))
                    metrics["val/loss"] = result["val_loss"][-1][1]
                tracker.log(metrics, done, printer=tqdm.write)
                progress.update(1)
                progress.set_postfix(loss=f"{metrics['sft/loss']:.4f}")
                result["train_loss"] = metrics["sft/loss"]
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
