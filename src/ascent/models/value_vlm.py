"""A critic for a vision-language model: its backbone (vision tower and language model) with a
one-output head on every token.

transformers has no token-classification class for Qwen2-VL / Qwen2.5-VL, so this module is
the same thing built from the generative checkpoint: ``model`` (the vision-language model)
and ``score``, a fresh ``Linear(hidden, 1)`` initialised as transformers initialises a
token-classification head (normal, std ``initializer_range``; from a fixed seed, so every
rank builds the same head), in place of the language head. Called like a transformers
model, it returns an object whose ``logits`` are the values (..., 1).
"""

from types import SimpleNamespace

import torch
from torch import nn


class VisionValueModel(nn.Module):
    base_model_prefix = "model"  # LoRA (``models.lora.heads``): ``score`` trains whole

    def __init__(self, generative: nn.Module) -> None:
        super().__init__()
        self.model = generative.model
        self.config = generative.config
        self._no_split_modules = generative._no_split_modules
        text = self.config.get_text_config()
        self.score = nn.Linear(text.hidden_size, 1, dtype=next(generative.parameters()).dtype)
        # Seeded: every rank (and every load) starts from the same head.
        seeded = torch.Generator().manual_seed(0)
        std = getattr(text, "initializer_range", 0.02)
        nn.init.normal_(self.score.weight, std=std, generator=seeded)
        nn.init.zeros_(self.score.bias)

    @property
    def base_model(self) -> nn.Module:
        return self.model

    def get_input_embeddings(self) -> nn.Module:
        return self.model.get_input_embeddings()

    def forward(self, **inputs: torch.Tensor) -> SimpleNamespace:
        hidden = self.model(**inputs).last_hidden_state
        return SimpleNamespace(logits=self.score(hidden))
