"""SFT tokenization: exactly the assistant tokens carry loss, in multi-turn conversations with
tool calls and tool results, under the tiny model's template and a tool-aware one."""

import json

import pytest

from ascent.data.files import MalformedRow, read_rows
from ascent.data.sft import SFTDataConfig, chat_example, load_sft_examples
from ascent.models import load_tokenizer

# A tool-aware ChatML template written for this test: tools listed in the system turn,
# assistant tool calls as <tool_call> JSON, tool results as a user turn in <tool_response>.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n{% for tool in tools %}{{ tool | tojson }}\n"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response>"
    "<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for call in m.tool_calls or [] %}<tool_call>{{ call | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 6*7? Use the calculator."},
    {
        "role": "assistant",
        "content": "Calling it.",
        "tool_calls": [{"name": "calc", "arguments": {"expr": "6*7"}}],
    },
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "It is 42."},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "You're welcome."},
]
TOOLS = [{"name": "calc", "description": "evaluate arithmetic"}]


def assistant_text(message):
    calls = "".join(
        f"<tool_call>{json.dumps(c)}</tool_call>" for c in message.get("tool_calls", [])
    )
    return message["content"] + calls + "<|im_end|>\n"


@pytest.fixture
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


@pytest.mark.parametrize("tool_template", [False, True])
def test_exactly_the_assistant_tokens_carry_loss(tokenizer, tool_template):
    if tool_template:
        tokenizer.chat_template = TOOL_TEMPLATE
    messages = CONVERSATION if tool_template else [m for m in CONVERSATION if "tool_calls" not in m]
    example = chat_example(tokenizer, messages, TOOLS if tool_template else None)
    full = tokenizer.apply_chat_template(
        messages, tools=TOOLS if tool_template else None, tokenize=False
    )
    assert tokenizer.decode(example.input_ids) == full
    trained = [t for t, m in zip(example.input_ids, example.loss_mask, strict=True) if m]
    expected = "".join(assistant_text(m) for m in messages if m["role"] == "assistant")
    assert tokenizer.decode(trained) == expected
    # The trained tokens form contiguous runs, one per assistant turn.
    runs = sum(
        1 for a, b in zip([0, *example.loss_mask], example.loss_mask, strict=False) if b and not a
    )
    assert runs == sum(m["role"] == "assistant" for m in messages)


def test_a_template_that_rewrites_earlier_turns_is_refused(tokenizer):
    # Renders earlier assistant turns differently once a later turn exists.
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m.role == 'assistant' and not loop.last %}[old]"
        "{% else %}{{ m.content }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}>{% endif %}"
    )
    with pytest.raises(MalformedRow, match="prefix by prefix"):
        chat_example(
            tokenizer,
            [
                *CONVERSATION[1:3],
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "y"},
            ],
        )


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_prompt_response_rows_plain_and_chat(tokenizer, tmp_path):
    file = write_jsonl(tmp_path / "pr.jsonl", [{"prompt": "2+2=", "response": "4"}])
    chat, _ = load_sft_examples([file], tokenizer, SFTDataConfig(train_files=[file]))
    plain, _ = load_sft_examples(
        [file], tokenizer, SFTDataConfig(train_files=[file], template="none")
    )
    trained = [t for t, m in zip(plain[0].input_ids, plain[0].loss_mask, strict=True) if m]
    assert tokenizer.decode(trained) == "4<|im_end|>"
    assert tokenizer.decode(plain[0].input_ids) == "2+2=4<|im_end|>"
    chat_trained = [t for t, m in zip(chat[0].input_ids, chat[0].loss_mask, strict=True) if m]
    assert tokenizer.decode(chat_trained) == "4<|im_end|>\n"


def test_overlong_rows_are_truncated_or_dropped_and_counted(tokenizer, tmp_path):
    rows = [
        {"prompt": "hi", "response": "short"},
        {"prompt": "x" * 40, "response": "long answer"},  # response starts past 30 tokens
        {"prompt": "hello", "response": "y" * 40},  # the response is cut
    ]
    file = write_jsonl(tmp_path / "long.jsonl", rows)
    kept, counts = load_sft_examples(
        [file], tokenizer, SFTDataConfig(train_files=[file], max_length=30)
    )
    assert counts == {"rows": 3, "kept": 2, "truncated": 2, "dropped_no_loss": 1}
    assert all(len(e.input_ids) <= 30 for e in kept)
    _, counts = load_sft_examples(
        [file], tokenizer, SFTDataConfig(train_files=[file], max_length=30, overlong="drop")
    )
    assert counts == {"rows": 3, "kept": 1, "dropped_overlong": 2}


def test_malformed_rows_name_the_row_and_field(tokenizer, tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        {"prompt": "only a prompt"},
        {"messages": [{"role": "user", "content": "no answer"}]},
    ]
    file = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(MalformedRow, match=r"row 1 of .*bad.jsonl: missing field 'response'"):
        load_sft_examples([file], tokenizer, SFTDataConfig(train_files=[file]))
    kept, counts = load_sft_examples(
        [file], tokenizer, SFTDataConfig(train_files=[file], malformed="skip")
    )
    assert len(kept) == 1 and counts["skipped_malformed"] == 2
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"prompt": "a", "response": "b"}\n{not json\n')
    with pytest.raises(MalformedRow, match=r"line 2 of .*broken.jsonl is not valid JSON"):
        read_rows(broken)


def test_parquet_jsonl_and_datasets_directories_read_the_same(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"prompt": f"p{i}", "response": f"r{i}"} for i in range(5)]
    jsonl = write_jsonl(tmp_path / "rows.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rows.parquet")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    for path in (jsonl, tmp_path / "rows.parquet", tmp_path / "saved"):
        assert [r.data for r in read_rows(path)] == rows
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_rows(tmp_path / "missing.parquet")


def test_tool_definitions_are_checked_and_stored_json_renders_the_same(tokenizer, tmp_path):
    """A row's tools as a JSON string (parquet's usual form) give the example the list gives;
    a malformed definition names its row and position."""
    tokenizer.chat_template = TOOL_TEMPLATE
    messages = [m for m in CONVERSATION if "tool_calls" not in m]
    rows = [
        {"messages": messages, "tools": TOOLS},
        {"messages": messages, "tools": json.dumps(TOOLS)},
    ]
    file = write_jsonl(tmp_path / "tools.jsonl", rows)
    (listed, stored), _ = load_sft_examples([file], tokenizer, SFTDataConfig(train_files=[file]))
    assert listed == stored
    assert listed == chat_example(tokenizer, messages, [{"type": "function", "function": TOOLS[0]}])
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{"messages": messages, "tools": [{"parameters": {}}]}]
    )
    with pytest.raises(MalformedRow, match=r"row 0 of .*bad\.jsonl: tools\[0\] must be a tool"):
        load_sft_examples([bad], tokenizer, SFTDataConfig(train_files=[bad]))
