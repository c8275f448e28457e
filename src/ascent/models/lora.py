"""LoRA adapters through peft: only the adapters train; the reference policy is the same
model with adapters disabled, so no second copy of the weights is held."""

import torch
from torch import nn

from ascent.engine.config import LoraSettings

ADAPTER_SEED = 0


def apply_lora(
    model: nn.Module,
    settings: LoraSettings,
    *,
    train_heads: bool = False,
    seed: int = ADAPTER_SEED,
) -> nn.Module:
    """``model`` wrapped by peft with LoRA on ``settings.target_modules``; base weights frozen.
    The adapters' random initialisation draws from ``seed``.

    ``train_heads``: the modules outside the backbone (a reward model's fresh score head)
    train in full beside the adapters. They keep their own names (no peft wrapper around
    them), so the merged weights load into the plain transformers class."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        bias="none",
        task_type=None if train_heads else "CAUSAL_LM",
        # all-linear would put adapters on a score head too; it trains whole instead
        exclude_modules=heads(model) if train_heads else None,
    )
    # The adapters' random initialisation from a fixed seed: every rank of a sharded model
    # must start from the same adapters, whatever else drew random numbers before.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        wrapped = get_peft_model(model, config)
    if train_heads:
        for name in heads(model):
            getattr(model, name).requires_grad_(True)
    return wrapped


def heads(model: nn.Module) -> list[str]:
    """The top-level modules with weights besides the backbone (``base_model_prefix``): the
    score head of a sequence classifier (``score``, ``classifier``, ...)."""
    backbone = getattr(model, "base_model_prefix", "model")
    return [
        name
        for name, child in model.named_children()
        if name != backbone and any(True for _ in child.parameters())
    ]
