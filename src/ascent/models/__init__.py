"""Hugging Face models and tokenizers: loading from a local directory, LoRA, tiny test models."""

from ascent.models.loading import load_causal_lm, load_tokenizer, load_value_model
from ascent.models.tiny import build_tiny_model

__all__ = ["build_tiny_model", "load_causal_lm", "load_tokenizer", "load_value_model"]
