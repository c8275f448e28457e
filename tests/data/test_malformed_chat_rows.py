"""Malformed chat rows, RL prompts and SFT conversations alike, from JSONL and parquet: `stop`
names the file, the row and what is wrong; `skip` keeps exactly the good rows and counts the
others. Messages are checked before rendering, and what the chat template itself refuses is
reported the same way."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ascent.data.files import MalformedRow
from ascent.data.rl import RLDataConfig, load_rl_prompts
from ascent.data.sft import SFTDataConfig, load_sft_examples
from ascent.models import load_tokenizer

# The tiny model's ChatML template, refusing a system message anywhere but first, as many
# real templates do.
STRICT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and not loop.first %}"
    "{{ raise_exception('System message must be at the beginning.') }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# name: (the bad messages, what the error says, whether parquet can hold them beside good rows)
BAD = {
    "content missing": ([{"role": "user"}], r"\[0\] \(role 'user'\) has no 'content'", True),
    "empty list": ([], r"is an empty list", True),
    "content a number": (
        [{"role": "user", "content": 7}],
        r"\[0\] \(role 'user'\) has 'content' of type int",
        False,
    ),
    "content a dict": (
        [{"role": "user", "content": {"text": "hi"}}],
        r"has 'content' of type dict",
        False,
    ),
    "part without a type": (
        [{"role": "user", "content": [{"text": "hi"}]}],
        r"content\[0\] that is not a content part",
        False,
    ),
    "role missing": ([{"content": "hi"}], r"\[0\] has no 'role'", True),
    "system not first": (
        [{"role": "user", "content": "hi"}, {"role": "system", "content": "be terse"}],
        r"chat template refuses this conversation: TemplateError: System message must be",
        True,
    ),
    # Content parts pass the checks; this template cannot join them to text, and says so.
    "parts the template cannot render": (
        [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        r"chat template refuses this conversation: TypeError: ",
        False,
    ),
}
PARQUET_CASES = [name for name, (_, _, parquet) in BAD.items() if parquet]


@pytest.fixture
def tokenizer(tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    tokenizer.chat_template = STRICT_TEMPLATE
    return tokenizer


def good_messages(tag):
    return [{"role": "system", "content": "be terse"}, {"role": "user", "content": tag}]


def rl_row(tag, messages):
    return {
        "data_source": "test",
        "prompt": messages,
        "reward_model": {"ground_truth": tag},
    }


def sft_row(tag, messages):
    # An assistant answer after the messages; an empty conversation stays empty.
    answer = [{"role": "assistant", "content": f"answer {tag}"}]
    return {"messages": [*messages, *answer] if messages else []}


def rl_load(paths, tokenizer, malformed):
    prompts, counts = load_rl_prompts(
        paths, tokenizer, RLDataConfig(train_files=paths, malformed=malformed)
    )
    return [p.ground_truth for p in prompts], counts


def sft_load(paths, tokenizer, malformed):
    examples, counts = load_sft_examples(
        paths, tokenizer, SFTDataConfig(train_files=paths, malformed=malformed)
    )
    texts = [tokenizer.decode(e.input_ids) for e in examples]
    return [text.split("answer ")[1].split("<|im_end|>")[0] for text in texts], counts


KINDS = {"rl": (rl_row, rl_load), "sft": (sft_row, sft_load)}


def write(path, rows):
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


CASES = [
    pytest.param(kind, name, suffix, id=f"{kind}-{name}-{suffix}")
    for kind in KINDS
    for name in BAD
    for suffix in ("jsonl", "parquet")
    if suffix == "jsonl" or name in PARQUET_CASES
]


@pytest.mark.parametrize(("kind", "name", "suffix"), CASES)
def test_a_malformed_chat_row_stops_with_its_file_and_row_or_is_skipped(
    tokenizer, tmp_path, kind, name, suffix
):
    make_row, load = KINDS[kind]
    messages, says, _ = BAD[name]
    rows = [make_row(tag, good_messages(tag)) for tag in ("g0", "g1", "g3")]
    rows.insert(2, make_row("bad", messages))
    path = write(tmp_path / f"train.{suffix}", rows)
    with pytest.raises(MalformedRow, match=rf"^row 2 of .*train\.{suffix}: .*{says}") as error:
        load([path], tokenizer, "stop")
    assert "data.malformed=skip" in str(error.value)
    kept, counts = load([path], tokenizer, "skip")
    assert kept == ["g0", "g1", "g3"]
    assert counts == {"rows": 4, "kept": 3, "skipped_malformed": 1}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_skip_keeps_exactly_the_good_rows_among_many_bad_ones(tokenizer, tmp_path, kind, suffix):
    make_row, load = KINDS[kind]
    bad = BAD if suffix == "jsonl" else PARQUET_CASES
    rows = []
    for index, name in enumerate(bad):
        rows += [make_row(f"g{index}", good_messages(f"g{index}")), make_row(name, BAD[name][0])]
    path = write(tmp_path / f"train.{suffix}", rows)
    kept, counts = load([path], tokenizer, "skip")
    assert kept == [f"g{index}" for index in range(len(bad))]
    assert counts == {"rows": 2 * len(bad), "kept": len(bad), "skipped_malformed": len(bad)}
    with pytest.raises(MalformedRow, match=rf"^row 1 of .*train\.{suffix}: "):
        load([path], tokenizer, "stop")


def test_an_assistant_turn_that_only_calls_tools_needs_no_content(tokenizer, tmp_path):
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
        "{% for call in m.tool_calls or [] %}<tool_call>{{ call | tojson }}</tool_call>"
        "{% endfor %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    call = [{"name": "calc", "arguments": {"expr": "6*7"}}]
    rows = [
        {
            "messages": [
                {"role": "user", "content": "6*7?"},
                {"role": "assistant", "content": content, "tool_calls": call},
                {"role": "tool", "content": "42"},
                {"role": "assistant", "content": "42"},
            ]
        }
        for content in (None, "")
    ]
    path = write(tmp_path / "tools.jsonl", rows)
    _, counts = load_sft_examples([path], tokenizer, SFTDataConfig(train_files=[path]))
    assert counts == {"rows": 2, "kept": 2}


def test_a_conversation_opening_with_the_assistant_is_named(tokenizer, tmp_path):
    path = write(tmp_path / "train.jsonl", [{"messages": [{"role": "assistant", "content": "hi"}]}])
    with pytest.raises(MalformedRow, match=r"row 0 of .* opens with an assistant turn"):
        load_sft_examples([path], tokenizer, SFTDataConfig(train_files=[path]))


@pytest.mark.parametrize("kind", KINDS)
def test_a_tokenizer_without_a_chat_template_stops_even_when_skipping(tokenizer, tmp_path, kind):
    make_row, load = KINDS[kind]
    tokenizer.chat_template = None  # not the rows' fault: skipping would drop every one of them
    path = write(tmp_path / "train.jsonl", [make_row("g0", good_messages("g0"))])
    with pytest.raises(ValueError, match="the tokenizer has no chat template") as error:
        load([path], tokenizer, "skip")
    assert not isinstance(error.value, MalformedRow)
