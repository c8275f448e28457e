"""The Tinker service's settings, in ascent's config tree: the base checkpoint (``model``),
how each trained model runs (``training``: sharding, AdamW's implementation, micro-batches),
on how many ranks (``resources``, as for every trainer: more than one device starts the
model's ranks over Ray), and the sampling engines (``sampling``: the native engine's limits).

What a client chooses stays the client's: the LoRA rank (or all weights), Adam's learning
rate, betas, eps, weight decay and clipping, per ``optim_step``.

    ascent service service.yaml resources.devices_per_node=2
    ascent service MODEL_DIR training.tokens_per_micro_batch=4096
"""

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from ascent.config import load_config
from ascent.engine.config import FSDPConfig, ModelConfig, OptimConfig, Strict
from ascent.rollout.engine_settings import EngineLimits
from ascent.workers.resources import ResourcesConfig


class TrainingSettings(Strict):
    """How every trained model of the service runs; the same for LoRA and full fine-tuning."""

    fsdp: FSDPConfig = Field(FSDPConfig(), description="Sharding (FSDPConfig).")
    adamw: Literal["auto", "fused", "foreach", "for-loop"] = Field(
        "auto", description="How AdamW runs (OptimConfig.implementation)."
    )
    tokens_per_micro_batch: int = Field(
        8192, ge=1, description="Token budget of one packed forward/backward of a call's datums."
    )
    chunk_tokens: int = Field(1024, ge=1, description="Tokens per log-prob chunk.")
    lora_alpha: float = Field(
        32.0,
        gt=0,
        description="LoRA scale numerator: a client's rank-r adapters add (alpha / r) B A.",
    )

    def optim(self) -> OptimConfig:
        """The engine's optimiser; its learning rate, betas, eps, decay and clipping are
        replaced by each ``optim_step``'s."""
        return OptimConfig(implementation=self.adamw)


class SamplingSettings(EngineLimits):
    """The native engines that serve sampling clients (one per set of weights in use)."""

    engines: int = Field(2, ge=1, description="Engines kept loaded (least recently used closed).")
    snapshots_kept: int = Field(
        2,
        ge=1,
        description="Per trained model, the newest snapshot sampling sessions kept (an RL loop "
        "makes one a step); older ones are closed and their weights deleted.",
    )


class ServiceConfig(Strict):
    """``ascent service``: the Tinker API over one base checkpoint."""

    model: ModelConfig = Field(
        description="The base checkpoint (ModelConfig; no lora: clients choose)."
    )
    name: str | None = Field(
        None, description="The base model's name for clients; None: the checkpoint's own."
    )
    root: str = Field(
        "tinker-service", description="Where checkpoints (tinker:// paths) are written."
    )
    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8000, ge=0, le=65535, description="Port to listen on.")
    poll_s: float = Field(
        20.0, gt=0, description="How long a retrieve_future is held while its call runs."
    )
    session_timeout_s: float = Field(
        300.0,
        gt=0,
        description="A client session without a heartbeat this long is ended: its models' "
        "ranks and memory are freed (the SDK beats every 10 s).",
    )
    training: TrainingSettings = Field(
        TrainingSettings(), description="Each trained model (TrainingSettings)."
    )
    resources: ResourcesConfig = Field(
        ResourcesConfig(), description="Ranks of each trained model (ResourcesConfig)."
    )
    sampling: SamplingSettings = Field(
        SamplingSettings(), description="Sampling engines (SamplingSettings)."
    )

    @model_validator(mode="after")
    def _clients_choose_lora(self) -> "ServiceConfig":
        if self.model.lora is not None:
            raise ValueError(
                "model.lora: a Tinker client chooses LoRA (and its rank) per training client; "
                "remove it (training.lora_alpha sets the scale)"
            )
        if self.model.packing == "padded":
            raise ValueError(
                "model.packing=padded: the service packs a call's datums as rows that do not "
                "attend to each other; remove it"
            )
        return self

    def served_name(self) -> str:
        """What clients call the base model: ``name``, else the checkpoint's own
        ``_name_or_path``, else its directory."""
        if self.name:
            return self.name
        config = Path(self.model.path) / "config.json"
        own = json.loads(config.read_text()).get("_name_or_path") if config.is_file() else None
        return own or self.model.path


def load_service_config(source: str, overrides: list[str]) -> ServiceConfig:
    """``ascent service SOURCE key=value ...``: SOURCE is a YAML config file, or a checkpoint
    directory (the same as a config of ``model.path`` alone); the overrides come after."""
    if Path(source).is_dir():
        return load_config(ServiceConfig, None, [f"model.path={source}", *overrides])
    return load_config(ServiceConfig, source, overrides)
