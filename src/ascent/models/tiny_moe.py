"""A tiny mixture-of-experts model built locally: Qwen3-MoE (or Qwen2-MoE) through
transformers' own classes, saved like a real checkpoint with the byte tokenizer of
``ascent.models.tiny``.

Its experts are fused 3-D parameters as in the real model (``mlp.experts.gate_up_proj``
(E, 2I, H), ``mlp.experts.down_proj`` (E, H, I)) behind a top-k softmax router
(``mlp.gate.weight`` (E, H)); ``mlp_only_layers`` makes some layers dense, as some real
checkpoints do. The head dimension is hidden_size / heads (32 by default: vLLM's CPU
attention has no kernel below 32).
"""

from pathlib import Path

from ascent.models.tiny import build_byte_tokenizer, save_initialised


def build_tiny_moe(
    directory: str | Path,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    experts: int = 4,
    experts_per_token: int = 2,
    expert_size: int = 64,
    dense_layers: tuple[int, ...] = (),
    intermediate_size: int = 128,
    norm_topk_prob: bool = True,
    max_positions: int = 512,
    family: str = "qwen3_moe",
    seed: int = 0,
) -> Path:
    """Write a randomly initialised tiny Qwen3-MoE and its tokenizer to ``directory``: each
    layer routes every token to ``experts_per_token`` of ``experts`` SiLU-gated experts of
    width ``expert_size``, except ``dense_layers`` (an MLP of ``intermediate_size``).
    ``family="qwen2_moe"``: Qwen2-MoE, whose sparse layers add a shared expert (width
    ``intermediate_size``, scaled by a sigmoid gate) and whose attention has q/k/v biases."""
    from transformers import Qwen2MoeConfig, Qwen3MoeConfig

    if family not in ("qwen3_moe", "qwen2_moe"):
        raise ValueError(f"family must be qwen3_moe or qwen2_moe, not {family!r}")
    tokenizer = build_byte_tokenizer()
    shared = {"shared_expert_intermediate_size": intermediate_size}
    config_class, extra = (
        (Qwen2MoeConfig, shared)
        if family == "qwen2_moe"
        else (Qwen3MoeConfig, {"head_dim": hidden_size // heads})
    )
    config = config_class(
        **extra,
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_experts=experts,
        num_experts_per_tok=experts_per_token,
        moe_intermediate_size=expert_size,
        mlp_only_layers=list(dense_layers),
        norm_topk_prob=norm_topk_prob,
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return save_initialised(config, tokenizer, directory, seed)
