"""``ascent export CHECKPOINT OUT_DIR``: a transformers model from a checkpoint, offline.

Needs nothing but the checkpoint directory (it holds the model's transformers config, the
tokenizer and the resolved run config) and one process: no Ray, no process group, any
number of ranks at save time. The trained model's sharded weights are read with
torch.distributed.checkpoint into a freshly built model, resharded to one full copy.

What is exported follows the checkpoint: the policy of an RL run (``actor``) or of an SFT
run (``sft``) as a causal LM, the reward model of an ``ascent rm`` run (``rm``) as a
one-label sequence classifier, the same model the run writes to ``<run_dir>/hf`` at its end.

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
from torch import nn

from ascent.engine.config import LoraSettings
from ascent.engine.modules import PolicyModule, SequenceScoreModule
from ascent.trainer.checkpoint_parts import CONFIG_FILE, MODEL_FILES
from ascent.trainer.checkpoints import CheckpointError, Checkpoints

# The role directories holding an exportable model: an RL or SFT policy, or a reward model.
EXPORTED_ROLES = ("actor", "sft", "rm")


def export_checkpoint(
    checkpoint: str | Path, out_dir: str | Path, lora: Literal["merge", "adapter"] = "merge"
) -> Path:
    """Write the checkpoint's trained model to ``out_dir`` (safetensors, config, tokenizer).
    ``checkpoint`` is a checkpoint directory or a run directory (its newest intact one).
    Returns the checkpoint used."""
    checkpoint = Checkpoints(checkpoint).resolve(str(checkpoint))  # verified against its manifest
    role = next((r for r in EXPORTED_ROLES if (checkpoint / r).is_dir()), None)
    missing = [p for p in (MODEL_FILES, CONFIG_FILE) if not (checkpoint / p).exists()]
    if role is None or missing:
        raise CheckpointError(
            f"{checkpoint} cannot be exported: it has no "
            f"{' or '.join(EXPORTED_ROLES) if role is None else ' or '.join(missing)} "
            "(checkpoints written before ascent 0.2 lack the model files)"
        )
    settings = yaml.safe_load((checkpoint / CONFIG_FILE).read_text())["model"]
    lora_settings = LoraSettings(**settings["lora"]) if settings.get("lora") else None
    if lora == "adapter" and lora_settings is None:
        raise ValueError(f"--lora adapter: {checkpoint} was not trained with LoRA adapters")
    if lora == "adapter" and role == "rm":
        raise ValueError(
            f"--lora adapter: {checkpoint} is a reward model, whose score head trains whole "
            "beside the adapters and is not part of them; export it merged (the default)"
        )
    model = _load_trained(checkpoint, role, lora_settings, settings.get("trust_remote_code", False))
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


def _load_trained(
    checkpoint: Path, role: str, lora: LoraSettings | None, trust_remote_code: bool
) -> nn.Module:
    """The model of ``role`` built from the checkpoint's config, its weights read from the
    role's sharded state (saved under the engine's names: the model inside its root module,
    in "model")."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    files = checkpoint / MODEL_FILES
    if role == "rm":
        from ascent.models.loading import load_tokenizer, reward_model_config
        from ascent.workers.reward_model import fallback_pad_id

        tokenizer = load_tokenizer(files, trust_remote_code=trust_remote_code)
        config = reward_model_config(files, fallback_pad_id(tokenizer), trust_remote_code)
        auto_class, root = AutoModelForSequenceClassification, SequenceScoreModule
    else:
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(
            files, trust_remote_code=trust_remote_code, local_files_only=True
        )
        auto_class, root = AutoModelForCausalLM, PolicyModule
    model = auto_class.from_config(config, dtype=torch.float32, trust_remote_code=trust_remote_code)
    if lora is not None:
        from ascent.models.lora import apply_lora

        # the reward model's score head is trained whole, beside its adapters
        model = apply_lora(model, lora, train_heads=role == "rm")
    module = root(model)
    state = {"model": module.state_dict()}
    dcp.load(state, checkpoint_id=str(checkpoint / role))
    module.load_state_dict(state["model"])
    return model


def _copy_model_files(source: Path, out_dir: Path) -> None:
    """Tokenizer and generation config (config.json is the model's own, already written)."""
    for path in source.iterdir():
        if path.is_file() and path.name != "config.json":
            shutil.copy(path, out_dir / path.name)
