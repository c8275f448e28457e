"""RL prompts in verl's parquet schema: rendering, filtering, clear errors on bad rows, and a
prompt stream that a checkpoint continues exactly."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ascent.data.files import MalformedRow
from ascent.data.rl import PromptStream, RLDataConfig, RLPrompt, load_rl_prompts, prompts_batch
from ascent.models import load_tokenizer


@pytest.fixture
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


def verl_row(question, answer, **extra):
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": "train", "index": 0},
        **extra,
    }


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_verl_parquet_rows_render_with_the_chat_template(tokenizer, tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [verl_row("What is 2+3?", "5")])
    prompts, counts = load_rl_prompts([path], tokenizer, RLDataConfig(train_files=[path]))
    assert counts == {"rows": 1, "kept": 1}
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, tokenize=False
    )
    assert tokenizer.decode(prompts[0].prompt_ids) == expected
    assert prompts[0].ground_truth == "5" and prompts[0].data_source == "openai/gsm8k"
    assert prompts[0].extra_info == {"split": "train", "index": 0}


def test_plain_text_prompts_without_a_template(tokenizer, tmp_path):
    row = verl_row("unused", "5") | {"prompt": "2+3="}
    path = write_parquet(tmp_path / "train.parquet", [row])
    config = RLDataConfig(train_files=[path], chat_template=False)
    prompts, _ = load_rl_prompts([path], tokenizer, config)
    assert tokenizer.decode(prompts[0].prompt_ids) == "2+3="


def with_bos(tokenizer):
    """The tokenizer as a base model's would be: BOS before any text it encodes."""
    from tokenizers.processors import TemplateProcessing

    bos = "<|endoftext|>"  # a special token the chat template does not write
    tokenizer.bos_token = bos
    tokenizer._tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, tokenizer.convert_tokens_to_ids(bos))]
    )
    return tokenizer


def test_raw_text_prompts_get_the_tokenizers_bos_and_chat_prompts_their_templates_own(
    tokenizer, tmp_path
):
    """Raw text is tokenized as the model reads raw text anywhere (a base model's BOS first,
    where its tokenizer adds one); a rendered template carries its own special tokens, so
    none is added twice. SFT's raw examples start the same way."""
    from ascent.data.sft import plain_example

    tokenizer = with_bos(tokenizer)
    bos = tokenizer.bos_token_id
    raw = write_parquet(tmp_path / "raw.parquet", [verl_row("unused", "5") | {"prompt": "2+3="}])
    config = RLDataConfig(train_files=[raw], chat_template=False)
    ids = load_rl_prompts([raw], tokenizer, config)[0][0].prompt_ids
    assert ids[0] == bos and tokenizer.decode(ids[1:]) == "2+3="
    assert plain_example(tokenizer, "2+3=", "5").input_ids[:1] == [bos]
    chat = write_parquet(tmp_path / "chat.parquet", [verl_row("What is 2+3?", "5")])
    ids = load_rl_prompts([chat], tokenizer, RLDataConfig(train_files=[chat]))[0][0].prompt_ids
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, tokenize=False
    )
    assert bos not in ids and tokenizer.decode(ids) == rendered  # the template has no BOS


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"reward_model": None}, r"row 1 of .*train\.jsonl: missing field 'reward_model'"),
        ({"reward_model": {"style": "rule"}}, "missing field 'reward_model.ground_truth'"),
        ({"prompt": 7}, "field 'prompt' must be a list of chat messages"),
    ],
)
def test_a_malformed_row_names_its_file_row_and_field(tokenizer, tmp_path, broken, message):
    rows = [verl_row("a", "1"), verl_row("b", "2") | broken, verl_row("c", "3")]
    path = tmp_path / "train.jsonl"  # JSONL: parquet's schema would refuse some of these rows
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    path = str(path)
    with pytest.raises(MalformedRow, match=message):
        load_rl_prompts([path], tokenizer, RLDataConfig(train_files=[path]))
    # Or, when asked, skipped and counted; the good rows all stay.
    config = RLDataConfig(train_files=[path], malformed="skip")
    prompts, counts = load_rl_prompts([path], tokenizer, config)
    assert [p.ground_truth for p in prompts] == ["1", "3"]
    assert counts == {"rows": 3, "kept": 2, "skipped_malformed": 1}


def test_prompts_over_the_length_limit_are_filtered_and_counted(tokenizer, tmp_path):
    rows = [verl_row("short", "1"), verl_row("long " * 100, "2")]
    path = write_parquet(tmp_path / "train.parquet", rows)
    config = RLDataConfig(train_files=[path], max_prompt_length=64)
    prompts, counts = load_rl_prompts([path], tokenizer, config)
    assert [p.ground_truth for p in prompts] == ["1"]
    assert counts == {"rows": 2, "kept": 1, "too_long": 1}


def numbered(count):
    return [RLPrompt([i + 1], "s", str(i)) for i in range(count)]


def test_the_stream_covers_each_epoch_once_in_a_seeded_order():
    stream = PromptStream(numbered(10), shuffle=True, seed=3)
    epoch_one = [p.ground_truth for p in stream.take(4) + stream.take(4) + stream.take(2)]
    epoch_two = [p.ground_truth for p in stream.take(10)]
    assert sorted(epoch_one) == sorted(epoch_two) == sorted(str(i) for i in range(10))
    assert epoch_one != epoch_two  # reshuffled per epoch
    again = PromptStream(numbered(10), shuffle=True, seed=3)
    assert [p.ground_truth for p in again.take(10)] == epoch_one
    other_seed = PromptStream(numbered(10), shuffle=True, seed=4)
    assert [p.ground_truth for p in other_seed.take(10)] != epoch_one


def test_a_restored_stream_continues_exactly_across_an_epoch_boundary():
    stream = PromptStream(numbered(7), shuffle=True, seed=0)
    stream.take(5)
    state = stream.state()
    expected = [p.ground_truth for p in stream.take(6)]  # crosses into epoch 2
    restored = PromptStream(numbered(7), shuffle=True, seed=0)
    restored.load_state(state)
    assert [p.ground_truth for p in restored.take(6)] == expected


def test_prompts_batch_left_pads():
    batch = prompts_batch([RLPrompt([5, 6, 7], "s", "a"), RLPrompt([8], "s", "b")], 0, "x")
    assert batch["prompts"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert batch["prompt_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch["uid"] == ["x-0", "x-1"] and batch["ground_truth"] == ["a", "b"]


def test_no_prompts_left_is_a_clear_error():
    with pytest.raises(ValueError, match="no prompts left"):
        PromptStream([], shuffle=True, seed=0)


SEARCH = {"name": "search", "description": "Look it up.", "parameters": {"type": "object"}}


@pytest.mark.parametrize(
    "stored", [[{"type": "function", "function": SEARCH}], [SEARCH], json.dumps([SEARCH])]
)
def test_a_rows_tool_definitions_render_with_its_prompt(tokenizer, tmp_path, stored):
    """A list, bare function schemas, or the list as a JSON string (parquet's usual form)."""
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(verl_row("Find ascent.", "x", tools=stored)) + "\n")
    prompts, _ = load_rl_prompts([str(path)], tokenizer, RLDataConfig(train_files=[str(path)]))
    tools = [{"type": "function", "function": SEARCH}]
    expected = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Find ascent."}],
        tools=tools,
        add_generation_prompt=True,
        tokenize=False,
    )
    assert '"name": "search"' in expected  # the template shows them
    assert tokenizer.decode(prompts[0].prompt_ids) == expected
    assert prompts[0].tools == tools
    assert prompts_batch(prompts, 0, "t")["tools"] == [tools]


@pytest.mark.parametrize(
    ("tools", "config", "message"),
    [
        ("[{", {}, r"row 0 of .*: field 'tools' is a string but not JSON"),
        ({"name": "x"}, {}, "field 'tools' must be a list of tool definitions, not dict"),
        ([{"parameters": {}}], {}, r"tools\[0\] must be a tool definition: a dict with a string"),
        ([SEARCH], {"chat_template": False}, "set data.chat_template=true, or drop the field"),
    ],
)
def test_malformed_tool_definitions_name_the_row(tokenizer, tmp_path, tools, config, message):
    row = verl_row("q", "1", tools=tools)
    if config:
        row["prompt"] = "q"
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(MalformedRow, match=message):
        load_rl_prompts([str(path)], tokenizer, RLDataConfig(train_files=[str(path)], **config))
