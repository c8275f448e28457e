"""The generation engine's settings, declared once: what is loaded, how many sequences run at
once, how long they may be, how much cache they get, in which dtype, with or without CUDA
graphs. Defaults and descriptions live here only.

Every backend takes an ``EngineSettings`` whole: the native engine (``NativeEngine.load``),
``ascent serve`` (its flags are generated from these fields: ``rollout.serve_args``) and the
vLLM command (``rollout.vllm_server``). A server backend declares, field by field, the flag
that applies it or why it does not apply (``CommandKnobs``); ``tests/rollout/
test_engine_knobs.py`` sets every field and checks that it reaches every backend or is
declared not applicable there, so a knob cannot be dropped silently.
"""

from copy import copy
from dataclasses import dataclass
from typing import Any, Literal

import torch
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from ascent.engine.config import ModelConfig, Strict

GenerationDtype = Literal["auto", "float32", "bfloat16", "float16"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
KV_CACHE_HELP = (
    "KV cache memory per rank. native, serve: reserved at start, and blocks that finished "
    "sequences leave stay cached for reuse until it is full (then sequences wait, or are "
    "preempted and computed again); None: grown with the live tokens, up to max_num_seqs "
    "sequences of max_model_len. vllm: --kv-cache-memory-bytes (None: vLLM's own on a GPU; on "
    "a CPU what max_num_seqs full-length sequences need, at least 64 MiB)."
)


def generation_dtype(name: GenerationDtype, device: torch.device) -> torch.dtype:
    """The named dtype; auto: bfloat16 on CUDA, float32 elsewhere."""
    if name != "auto":
        return DTYPES[name]
    return torch.bfloat16 if device.type == "cuda" else torch.float32


class EngineLimits(Strict):
    """What an engine holds and runs at once, whatever it loads (a model already in memory
    takes these alone: ``NativeEngine(model, limits)``)."""

    max_num_seqs: int = Field(64, ge=1, description="Sequences decoded at once.")
    max_model_len: int = Field(2048, ge=2, description="Prompt + response limit.")
    kv_cache_bytes: int | None = Field(None, gt=0, description=KV_CACHE_HELP)
    dtype: GenerationDtype = Field(
        "auto", description="Generation dtype; auto: bfloat16 on CUDA, float32 on CPU."
    )
    cuda_graphs: bool = Field(True, description="Capture decode steps in CUDA graphs on CUDA.")


class EngineSettings(EngineLimits):
    """One generation engine: the checkpoint it loads and the knobs it runs with."""

    model: ModelConfig = Field(description="Checkpoint of the initial weights (ModelConfig).")


def knob(name: str, **changes: Any) -> Any:
    """``EngineSettings``' declaration of field ``name`` (constraints, description) for a
    config that repeats the knob under its own section, with ``changes`` (e.g. a default of
    its own: the RL trainer decodes wider batches than a server's default)."""
    field = copy(EngineSettings.model_fields[name])
    for key, value in changes.items():
        setattr(field, key, value)
    return field


def setting_names(model: type[BaseModel] = EngineSettings, prefix: str = "") -> list[str]:
    """Dotted names of every leaf setting (nested settings such as ``model`` opened)."""
    names = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            names += setting_names(field.annotation, f"{prefix}{name}.")
        else:
            names.append(prefix + name)
    return names


def setting_field(name: str) -> FieldInfo:
    """The declaration of a dotted setting name (``model.trust_remote_code``)."""
    model: type[BaseModel] = EngineSettings
    *parents, leaf = name.split(".")
    for parent in parents:
        model = model.model_fields[parent].annotation
    return model.model_fields[leaf]


def setting_value(settings: BaseModel, name: str) -> Any:
    """The value of a dotted setting name in ``settings``."""
    for part in name.split("."):
        settings = getattr(settings, part)
    return settings


TRAINING_ONLY = {
    "model.gradient_checkpointing": "training only: generation runs no backward pass",
    "model.lora": "training only: the rollout generates with merged weights (LoRA is dropped "
    "from its model config, and refreshes carry the merged tensors)",
    "model.packing": "training only: how rows are laid out for the trainer's forward",
    "model.vision_tower": "training only: whether the trainer updates the vision tower",
}


@dataclass(frozen=True)
class Flag:
    """One setting on a command line. A name without ``--`` is a positional argument. A bool
    is a bare flag given when the value equals ``when`` (``--enforce-eager`` when
    ``cuda_graphs`` is false); ``when=None`` gives ``--name`` or ``--no-name``."""

    name: str
    when: bool | None = None

    def args(self, value: Any) -> list[str]:
        if isinstance(value, bool):
            if self.when is None:
                return [self.name if value else "--no-" + self.name.removeprefix("--")]
            return [self.name] if value == self.when else []
        if value is None:  # unset: the server's own default
            return []
        return [self.name, str(value)] if self.name.startswith("--") else [str(value)]


@dataclass(frozen=True)
class CommandKnobs:
    """How a server backend applies ``EngineSettings``: ``flags`` maps a dotted setting name
    to its flag, ``not_applicable`` to the reason it has none there."""

    flags: dict[str, Flag]
    not_applicable: dict[str, str]

    def args(self, settings: EngineSettings) -> list[str]:
        """The command-line arguments of every applicable setting, in ``flags`` order."""
        return [
            arg
            for name, flag in self.flags.items()
            for arg in flag.args(setting_value(settings, name))
        ]
