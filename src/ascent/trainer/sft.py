"""The SFT trainer: ``ascent sft CONFIG key=value ...``.

Next-token cross-entropy on the assistant's tokens (``ascent.data.sft``), in the loop that
``ascent.trainer.supervised`` describes: seeded epochs of ``batch_size`` examples, one
optimiser step each, validation loss every ``val_every`` steps, checkpoints in the format
the RL trainer resumes from, and a transformers export at the end.
"""

from dataclasses import replace

from pydantic import Field

from ascent.batch import Batch
from ascent.batch.fields import right_padded
from ascent.data.images import row_images_for
from ascent.data.sft import SFTDataConfig, SFTExample, load_sft_examples
from ascent.engine import FSDPConfig, ModelConfig, OptimConfig
from ascent.engine.config import Strict
from ascent.models.loading import load_tokenizer
from ascent.trainer.settings import RunSettings
from ascent.trainer.supervised import SupervisedTask, run_supervised
from ascent.trainer.tracking import TrackingConfig
from ascent.workers.resources import ResourcesConfig
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
    """Right-padded (B, L) input_ids, attention_mask and loss_mask; per row, its images."""
    ids, attention = right_padded([e.input_ids for e in examples], pad_id)
    loss, _ = right_padded([e.loss_mask for e in examples])
    fields = {"input_ids": ids, "attention_mask": attention, "loss_mask": loss}
    return Batch.from_dict(fields | {"images": [list(e.images) for e in examples]})


def train_sft(config: SFTConfig) -> dict:
    """Run SFT; returns the validation losses [(step, loss)], the final train loss and where
    things went (``ascent.trainer.supervised``)."""
    tokenizer = load_tokenizer(config.model.path, trust_remote_code=config.model.trust_remote_code)
    model = config.model
    images = row_images_for(model.path, config.data.max_image_pixels, model.trust_remote_code)
    train, counts = load_sft_examples(config.data.train_files, tokenizer, config.data, images)
    val, val_counts = load_sft_examples(config.data.val_files, tokenizer, config.data, images)
    print(f"sft data: train {dict(counts)}; validation {dict(val_counts)}")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    task = SupervisedTask(
        role="sft",
        worker=SFTWorker,
        worker_config=SFTWorkerConfig(
            model=config.model,
            optim=config.optim,
            fsdp=config.fsdp,
            tokens_per_micro_batch=config.trainer.tokens_per_micro_batch,
        ),
        collate=lambda examples: collate(examples, pad_id),
        padding=lambda example: replace(example, loss_mask=[0] * len(example.input_ids)),
        val_metrics=lambda sums: {"val/loss": sums["nll"] / max(sums["tokens"], 1.0)},
        console=["sft/loss", "sft/grad_norm", "sft/lr", "val/loss", "timing_s/step"],
    )
    result = run_supervised(config, tokenizer, task, train, val)
    result["val_loss"] = [(step, metrics["val/loss"]) for step, metrics in result["validation"]]
    if "train_metrics" in result:
        result["train_loss"] = result["train_metrics"]["sft/loss"]
    return result
