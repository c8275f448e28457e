"""LoRA adapters through peft: only the adapters train; the reference policy is the same
model with adapters disabled, so no second copy of the weights is held."""

from torch import nn

from ascent.engine.config import LoraSettings


def apply_lora(model: nn.Module, settings: LoraSettings) -> nn.Module:
    """``model`` wrapped by peft with LoRA on ``settings.target_modules``; base weights frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
