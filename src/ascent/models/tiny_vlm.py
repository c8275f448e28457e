"""A tiny Qwen2.5-VL built locally and saved like a real checkpoint, for tests and the vision
quickstart.

It is transformers' own ``Qwen2_5_VLForConditionalGeneration`` at toy size (a vision tower of
two blocks, patch 14, spatial merge 2, windowed attention in the first block and full in the
second, as in the real model), with random weights; the byte-level tokenizer of
``ascent.models.tiny`` plus Qwen2-VL's vision special tokens, and a ChatML template that
renders image content parts the way Qwen2-VL's does; and Qwen2-VL's image processor class
(``preprocessor_config.json``) with small pixel bounds, so a 64 x 64 image is 16 patches and
4 image tokens. Everything loads back with ``from_pretrained`` from the directory.
"""

from pathlib import Path

import torch

from ascent.models.tiny import SPECIAL_TOKENS, build_byte_tokenizer

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]

# ChatML with content parts: text parts render their text, image parts one image token
# between the vision start and end tokens (which ``expand_image_tokens`` then repeats).
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_vlm_tokenizer() -> object:
    """The byte-level tokenizer with Qwen2-VL's vision tokens and the template above."""
    tokenizer = build_byte_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS[1:] + VISION_TOKENS})
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    return tokenizer


def build_tiny_vlm(
    directory: str | Path,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    intermediate_size: int = 128,
    vision_hidden_size: int = 32,
    vision_depth: int = 2,
    min_pixels: int = 56 * 56,
    max_pixels: int = 112 * 112,
    family: str = "qwen2_5_vl",
    seed: int = 0,
) -> Path:
    """Write a randomly initialised tiny Qwen2.5-VL (``family="qwen2_vl"``: Qwen2-VL, whose
    vision tower has no windowed attention and a LayerNorm/GELU MLP), its tokenizer and
    image processor to ``directory``. The text head dimension is hidden_size / heads (32 by
    default: vLLM's CPU attention has no kernel below 32); its M-RoPE sections split
    head_dim / 2 frequencies as 1/4 temporal, 3/8 height, 3/8 width, like the real model's
    (16, 24, 24)."""
    from transformers import AutoModelForImageTextToText, Qwen2_5_VLConfig, Qwen2VLConfig
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    tokenizer = build_vlm_tokenizer()
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
    half = hidden_size // heads // 2
    sections = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    vision = dict(
        depth=vision_depth,
        hidden_size=vision_hidden_size,
        intermediate_size=2 * vision_hidden_size,
        num_heads=2,
        out_hidden_size=hidden_size,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        window_size=56,
        fullatt_block_indexes=[vision_depth - 1],
    )
    config_class = Qwen2_5_VLConfig
    if family == "qwen2_vl":
        config_class = Qwen2VLConfig
        vision = dict(
            depth=vision_depth,
            embed_dim=vision_hidden_size,
            hidden_size=hidden_size,
            mlp_ratio=2,
            num_heads=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
        )
    config = config_class(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=intermediate_size,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            max_position_embeddings=2048,
            rope_scaling={"type": "mrope", "mrope_section": sections},
            bos_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            tie_word_embeddings=False,
        ),
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    processor = Qwen2VLImageProcessorPil(min_pixels=min_pixels, max_pixels=max_pixels)
    processor.save_pretrained(directory)
    return directory
