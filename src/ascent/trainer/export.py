"""``ascent export CHECKPOINT OUT_DIR``: a transformers model from a checkpoint, offline.

Needs nothing but the checkpoint directory (it holds the model's transformers config, the
tokenizer and the resolved run config) and one process: no Ray, no process group, any
number of ranks at save time. The policy's sharded weights are read with
torch.distributed.checkpoint into a freshly built model, resharded to one full copy.

LoRA runs export either merged (a plain model whose weights include the adapters:
W + (alpha / r) B A) or as the adapter alone (peft's adapter_config.json and
adapter_model.safetensors, to load on top of the base model the run started from).
"""

import shutil
from pathlib import Path
from typing import Literal

import torch
import torch.distributed.checkpoint as dcp
import yaml

from ascent.engine.config import LoraSettings
from ascent.engine.modules import PolicyModule
from ascent.trainer.checkpoint_parts import CONFIG_FILE, MODEL_FILES
from ascent.trainer.checkpoints import CheckpointError, Checkpoints

POLICY_ROLES = ("actor", "sft")  # the role directory holding the policy, RL or SFT


def export_checkpoint(
    checkpoint: str | Path, out_dir: str | Path, lora: Literal["merge", "adapter"] = "merge"
) -> Path:
    """Write the checkpoint's policy to ``out_dir`` (safetensors, config, tokenizer).
    ``checkpoint`` is a checkpoint directory or a run directory (its newest intact one).
    Returns the checkpoint used."""
    checkpoint = Checkpoints(checkpoint).resolve(str(checkpoint))  # verified against its manifest
    role = next((r for r in POLICY_ROLES if (checkpoint / r).is_dir()), None)
    missing = [p for p in (MODEL_FILES, CONFIG_FILE) if not (checkpoint / p).exists()]
    if role is None or missing:
        raise CheckpointError(
            f"{checkpoint} cannot be exported: it has no "
            f"{' or '.join(POLICY_ROLES) if role is None else ' or '.join(missing)} "
            "(checkpoints written before ascent 0.2 lack the model files)"
        )
    settings = yaml.safe_load((checkpoint / CONFIG_FILE).read_text())["model"]
    lora_settings = LoraSettings(**settings["lora"]) if settings.get("lora") else None
    if lora == "adapter" and lora_settings is None:
        raise ValueError(f"--lora adapter: {checkpoint} was not trained with LoRA adapters")
    model = _load_policy(checkpoint, role, lora_settings, settings.get("trust_remote_code", False))
    out_dir = Path(out_dir)
    if lora_settings is not None and lora == "adapter":
        model.peft_config["default"].base_model_name_or_path = settings["path"]
        model.save_pretrained(out_dir)  # adapter_config.json + adapter_model.safetensors
    else:
        if lora_settings is not None:
            model = model.merge_and_unload()
        model.save_pretrained(out_dir)
    _copy_model_files(checkpoint / MODEL_FILES, out_dir)
    return checkpoint


def _load_policy(
    checkpoint: Path, role: str, lora: LoraSettings | None, trust_remote_code: bool
) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(
        checkpoint / MODEL_FILES, trust_remote_code=trust_remote_code, local_files_only=True
    )
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, trust_remote_code=trust_remote_code
    )
    if lora is not None:
        from ascent.models.lora import apply_lora

        model = apply_lora(model, lora)
    # The names the engine saved under: the model inside its PolicyModule, in "model".
    module = PolicyModule(model)
    state = {"model": module.state_dict()}
    dcp.load(state, checkpoint_id=str(checkpoint / role))
    module.load_state_dict(state["model"])
    return model


def _copy_model_files(source: Path, out_dir: Path) -> None:
    """Tokenizer and generation config (config.json is the model's own, already written)."""
    for path in source.iterdir():
        if path.is_file() and path.name != "config.json":
            shutil.copy(path, out_dir / path.name)
