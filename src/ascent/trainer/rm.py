"""The reward-model trainer: ``ascent rm CONFIG key=value ...``.

Bradley-Terry training on preference pairs (``ascent.data.preference``,
``ascent.algos.bradley_terry``) in the supervised loop (``ascent.trainer.supervised``):
seeded epochs of ``batch_size`` pairs, one optimiser step each, pairwise accuracy and loss on
the validation pairs every ``val_every`` steps, checkpoints and resume, and at the end a
transformers sequence-classification checkpoint in ``<run_dir>/hf`` that the RL trainer's
``reward_model`` role loads, as does ``AutoModelForSequenceClassification.from_pretrained``.

The model starts from ``model.path``: a causal LM (its backbone, with a new score head) or a
reward model (trained on).
"""

from dataclasses import replace

from pydantic import Field

from ascent.data.preference import PreferenceDataConfig, load_preference_pairs
from ascent.engine import FSDPConfig, ModelConfig, OptimConfig
from ascent.engine.config import Strict
from ascent.models.loading import load_tokenizer
from ascent.trainer.sft import SFTTrainerSettings
from ascent.trainer.supervised import SupervisedTask, run_supervised
from ascent.trainer.tracking import TrackingConfig
from ascent.workers.resources import ResourcesConfig
from ascent.workers.reward_trainer import RewardTrainerConfig, RewardTrainerWorker, collate_pairs


class RMTrainerSettings(SFTTrainerSettings):
    """The loop: pairs per step, evaluation, checkpoints."""

    run_dir: str = Field("runs/rm", description="Where checkpoints, metrics and the export go.")
    batch_size: int = Field(32, ge=1, description="Pairs per optimiser step (all ranks).")
    val_every: int = Field(50, ge=0, description="Validation every N steps (0: never).")
    val_batch_size: int = Field(64, ge=1, description="Pairs per validation batch.")


class RMConfig(Strict):
    """Reward-model training on preference pairs, the whole run."""

    model: ModelConfig = Field(description="The starting checkpoint (ModelConfig).")
    data: PreferenceDataConfig = Field(description="Preference pairs (PreferenceDataConfig).")
    optim: OptimConfig = Field(OptimConfig(lr=1e-5), description="Optimiser (OptimConfig).")
    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    trainer: RMTrainerSettings = Field(RMTrainerSettings(), description="The loop.")
    resources: ResourcesConfig = Field(ResourcesConfig(), description="Devices (ResourcesConfig).")
    tracking: TrackingConfig = Field(TrackingConfig(), description="Metric sinks (TrackingConfig).")


def val_metrics(sums: dict[str, float]) -> dict[str, float]:
    pairs = max(sums["pairs"], 1.0)
    return {
        "val/accuracy": sums["correct"] / pairs,
        "val/loss": sums["loss"] / pairs,
        "val/margin": sums["margin"] / pairs,
    }


def train_rm(config: RMConfig) -> dict:
    """Run reward-model training; returns the validation history [(step, {val/accuracy,
    val/loss, val/margin})], the last step's metrics and where things went."""
    tokenizer = load_tokenizer(config.model.path, trust_remote_code=config.model.trust_remote_code)
    train, counts = load_preference_pairs(config.data.train_files, tokenizer, config.data)
    val, val_counts = load_preference_pairs(config.data.val_files, tokenizer, config.data)
    print(f"preference pairs: train {dict(counts)}; validation {dict(val_counts)}")
    task = SupervisedTask(
        role="rm",
        worker=RewardTrainerWorker,
        worker_config=RewardTrainerConfig(
            model=config.model,
            optim=config.optim,
            fsdp=config.fsdp,
            tokens_per_micro_batch=config.trainer.tokens_per_micro_batch,
        ),
        collate=collate_pairs,
        padding=lambda pair: replace(pair, weight=0.0),
        val_metrics=val_metrics,
        console=["rm/loss", "rm/accuracy", "rm/grad_norm", "val/accuracy", "val/loss"],
    )
    return run_supervised(config, tokenizer, task, train, val)
