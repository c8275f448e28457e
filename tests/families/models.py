"""A tiny random checkpoint of every model family the native engine runs, built from
transformers' own config classes and saved like a real checkpoint (with the byte-level
tokenizer of ``ascent.models.tiny``), so the engine, the trainer and ``ascent train`` load
them through the path real checkpoints take.

Each is small (hidden 64, 2-3 layers) but keeps what makes its family itself: Gemma 3's
alternating sliding (window 8) and global layers with their two RoPE bases and a soft-cap,
Mistral's window, Llama 3's rope scaling over the positions the tests reach, Phi-3's fused
projections and half-width rotary, OLMo 2's post-norms, DeepSeek-V3's latent attention,
grouped routing with a correction bias, a dense first layer and a shared expert, Mixtral's
float32 router weights. Head and
latent dims are multiples of 16, so the CPU attention kernel runs (not the gathered path).
"""

from collections.abc import Callable
from pathlib import Path

import torch

from ascent.models.tiny import build_byte_tokenizer
from ascent.models.tiny_moe import build_tiny_moe
from ascent.models.tiny_vlm import build_tiny_vlm

SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
}


def _llama3() -> object:
    from transformers import LlamaConfig

    rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 32,  # the tests' sequences run past it
    }
    return LlamaConfig(**SMALL, rope_parameters=rope)


def _mistral() -> object:
    from transformers import MistralConfig

    return MistralConfig(**SMALL, sliding_window=8)


def _qwen3() -> object:
    from transformers import Qwen3Config

    return Qwen3Config(**SMALL, head_dim=16)


def _gemma3() -> object:
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        **SMALL | {"num_hidden_layers": 3},
        head_dim=16,
        sliding_window=8,
        sliding_window_pattern=2,  # sliding, global, sliding
        query_pre_attn_scalar=24,
        final_logit_softcapping=30.0,
    )


def _phi3() -> object:
    from transformers import Phi3Config

    return Phi3Config(**SMALL, partial_rotary_factor=0.5)


def _olmo2() -> object:
    from transformers import Olmo2Config

    return Olmo2Config(**SMALL)


def _deepseek_v3() -> object:
    from transformers import DeepseekV3Config

    return DeepseekV3Config(
        **SMALL | {"num_hidden_layers": 3, "num_key_value_heads": 4},
        first_k_dense_replace=1,  # layer 0 dense, layers 1-2 routed
        moe_intermediate_size=32,
        n_routed_experts=8,
        n_group=4,
        topk_group=2,
        num_experts_per_tok=2,
        n_shared_experts=1,
        q_lora_rank=32,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=16,
        v_head_dim=16,
    )


def _mixtral() -> object:
    from transformers import MixtralConfig

    return MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2, sliding_window=16)


def _with_correction_bias(model: torch.nn.Module) -> None:
    """DeepSeek's routers start with a zero correction bias; give it values, so that
    choosing by s + b (and weighting by s) is tested."""
    g = torch.Generator().manual_seed(7)
    for layer in model.model.layers:
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(gate, "e_score_correction_bias"):
            bias = gate.e_score_correction_bias
            bias.copy_(torch.randn(bias.shape, generator=g) * 0.02)


CONFIGS: dict[str, Callable[[], object]] = {
    "llama3": _llama3,
    "mistral": _mistral,
    "qwen3": _qwen3,
    "gemma3": _gemma3,
    "phi3": _phi3,
    "olmo2": _olmo2,
    "deepseek_v3": _deepseek_v3,
    "mixtral": _mixtral,
}
ADJUST = {"deepseek_v3": _with_correction_bias}
# Built by the project's own tiny builders (Qwen2: ascent.models.tiny, the suite's default).
OTHERS = ("qwen2", "qwen3_moe", "qwen2_moe", "qwen2_5_vl")
NAMES = (*CONFIGS, *OTHERS)


def build(name: str, directory: Path, seed: int = 0) -> Path:
    """The tiny checkpoint of family case ``name``, saved to ``directory``."""
    from transformers import AutoModelForCausalLM

    from ascent.models.tiny import build_tiny_model

    if name == "qwen2":
        return build_tiny_model(directory, seed=seed)
    if name in ("qwen3_moe", "qwen2_moe"):
        return build_tiny_moe(directory, layers=3, dense_layers=(1,), family=name, seed=seed)
    if name == "qwen2_5_vl":
        return build_tiny_vlm(directory, seed=seed)
    tokenizer = build_byte_tokenizer()
    config = CONFIGS[name]()
    config.vocab_size = len(tokenizer)
    config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    config.bos_token_id = None
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        ADJUST.get(name, lambda m: None)(model)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)
