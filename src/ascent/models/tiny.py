"""Tiny models and tokenizers built locally, saved like real checkpoints.

Tests and the quickstart never download anything: they build a Qwen2-shaped model of a few
hundred thousand parameters and a byte-level tokenizer, ``save_pretrained`` both into
a directory, and load it back through ``ascent.models.loading`` like any checkpoint.
The tokenizer is byte-level with one token per byte (262 tokens), so any text round-trips.
"""

from pathlib import Path

import torch

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# A ChatML-style template, so chat-format data renders the way it does for Qwen models; like
# Qwen's, it lists the ``tools`` it is given in a system block and asks for Hermes tool calls.
CHAT_TEMPLATE = (
    "{% if tools %}{{ '<|im_start|>system\\n# Tools\\n<tools>\\n' }}"
    "{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor %}"
    '{{ \'</tools>\\nCall a tool with <tool_call>{"name": ..., "arguments": ...}'
    "</tool_call><|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_byte_tokenizer() -> object:
    """A byte-level BPE tokenizer with no merges: one token per byte, plus ChatML specials.

    It has the structure of Qwen's and GPT-2's tokenizers (byte-level BPE), just without
    merges, so transformers loads it with the same classes as a real Qwen checkpoint (which
    rebuild the pre-tokenizer from vocab and merges) and every text round-trips.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # alphabet() is a set: sort it, or the ids would change from one process to the next.
    vocab = {char: i for i, char in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(
    directory: str | Path,
    *,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate_size: int = 128,
    max_positions: int = 512,
    tie_word_embeddings: bool = False,
    seed: int = 0,
) -> Path:
    """Write a randomly initialised Qwen2-shaped causal LM and its tokenizer to ``directory``."""
    from transformers import Qwen2Config

    tokenizer = build_byte_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_word_embeddings,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return save_initialised(config, tokenizer, directory, seed)


def save_initialised(config: object, tokenizer: object, directory: str | Path, seed: int) -> Path:
    """A causal LM of ``config`` with weights drawn from ``seed``, saved with ``tokenizer``
    to ``directory`` like any checkpoint."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    directory = Path(directory)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
