"""Chat templates written for the tests, each the shape of a real family's:

- CHATML_TOOLS: Qwen-2.5-like. Tools in a system block, tool results inside user turns as
  <tool_response> blocks (consecutive results share one turn), "\\n" after every <|im_end|>.
- LLAMA3: Llama-3-like headers, <|eot_id|> ends a turn with nothing after it, tool results as
  the "ipython" role, a <|begin_of_text|> at the start.
- THINK_STRIPPING: ChatML that drops the <think> part of every assistant turn but the last
  (like Qwen3's): not append-only once an assistant turn that thought is followed by more.
"""

from ascent.models.tiny import build_byte_tokenizer

CHATML_TOOLS = (
    "{% if tools %}{{ '<|im_start|>system\\n# Tools\\n<tools>\\n' }}"
    "{% for tool in tools %}{{ tool | tojson }}{{ '\\n' }}{% endfor %}"
    "{{ '</tools><|im_end|>\\n' }}{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}"
    "{{ '<|im_start|>user' }}{% endif %}"
    "{{ '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}"
    "{{ '<|im_end|>\\n' }}{% endif %}"
    "{% elif message.role == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{% for call in message.tool_calls or [] %}"
    "{{ '\\n<tool_call>\\n' + call.function | tojson + '\\n</tool_call>' }}{% endfor %}"
    "{{ '<|im_end|>\\n' }}"
    "{% else %}{{ '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LLAMA3 = (
    "{{ '<|begin_of_text|>' }}"
    "{% if tools %}{{ '<|start_header_id|>system<|end_header_id|>\\n\\nTools: ' }}"
    "{{ tools | tojson }}{{ '<|eot_id|>' }}{% endif %}"
    "{% for message in messages %}"
    "{% set role = 'ipython' if message.role == 'tool' else message.role %}"
    "{{ '<|start_header_id|>' + role + '<|end_header_id|>\\n\\n' + message.content }}"
    "{{ '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

THINK_STRIPPING = (
    "{% for message in messages %}"
    "{% set content = message.content %}"
    "{% if message.role == 'assistant' and not loop.last and '</think>' in content %}"
    "{% set content = content.split('</think>')[-1].lstrip() %}{% endif %}"
    "{{ '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]

# name: (template, the token that ends an assistant turn)
TEMPLATES = {
    "chatml_tools": (CHATML_TOOLS, "<|im_end|>"),
    "llama3": (LLAMA3, "<|eot_id|>"),
    "think_stripping": (THINK_STRIPPING, "<|im_end|>"),
}


def tokenizer_for(name: str) -> object:
    """The byte tokenizer (one token per byte, specials atomic) with the named template."""
    tokenizer = build_byte_tokenizer()
    if name == "llama3":
        tokenizer.add_special_tokens({"additional_special_tokens": LLAMA3_SPECIALS})
    tokenizer.chat_template = TEMPLATES[name][0]
    return tokenizer
