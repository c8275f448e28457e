"""Preference pairs: the three row forms render the same conversation the reward model will
score, margins are read, long pairs keep their ends, and malformed rows are named."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ascent.data.files import MalformedRow
from ascent.data.preference import (
    PreferenceDataConfig,
    load_preference_pairs,
    reward_model_ids,
)
from ascent.models import load_tokenizer

PROMPT = [{"role": "user", "content": "say abcd"}]


def ids(tokenizer, *turns, prompt=PROMPT, **settings):
    settings = {"chat_template": True, "max_length": 1024} | settings
    return reward_model_ids(tokenizer, [*prompt, *turns], **settings)[0]


@pytest.fixture
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


@pytest.fixture
def load(tmp_path, tokenizer):
    def load(rows, name="pairs.parquet", **config):
        path = tmp_path / name
        if name.endswith(".parquet"):
            pq.write_table(pa.Table.from_pylist(rows), path)
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        settings = PreferenceDataConfig(train_files=[str(path)], **config)
        return load_preference_pairs(settings.train_files, tokenizer, settings)

    return load


def test_the_row_forms_give_the_same_conversation(load, tokenizer):
    good, bad = {"role": "assistant", "content": "1234"}, {"role": "assistant", "content": "xy"}
    rows = [
        {"chosen": [*PROMPT, good], "rejected": [*PROMPT, bad]},  # whole conversations
        {"prompt": "say abcd", "chosen": "1234", "rejected": "xy"},  # prompt + strings
        {"prompt": PROMPT, "chosen": [good], "rejected": [bad]},  # prompt + messages
    ]
    pairs, counts = load(rows, name="pairs.jsonl")
    assert counts == {"rows": 3, "kept": 3}
    expected_chosen, expected_rejected = ids(tokenizer, good), ids(tokenizer, bad)
    text = tokenizer.decode(expected_chosen)
    assert text == "<|im_start|>user\nsay abcd<|im_end|>\n<|im_start|>assistant\n1234<|im_end|>\n"
    for pair in pairs:
        assert pair.chosen_ids == expected_chosen and pair.rejected_ids == expected_rejected
        assert pair.margin == 0.0 and pair.weight == 1.0


def test_parquet_rows_with_margins(load):
    rows = [
        {"prompt": "say a", "chosen": "1", "rejected": "x", "margin": 2.5},
        {"prompt": "say b", "chosen": "2", "rejected": "y", "margin": None},
    ]
    pairs, _ = load(rows)
    assert [p.margin for p in pairs] == [2.5, 0.0]


def test_long_pairs_keep_their_ends_or_are_dropped(load, tokenizer):
    rows = [{"prompt": "say " + "a" * 50, "chosen": "1234", "rejected": "xy"}]
    pairs, counts = load(rows, max_length=20)
    assert counts["truncated"] == 1 and len(pairs[0].chosen_ids) == 20
    prompt = [{"role": "user", "content": "say " + "a" * 50}]
    full = ids(tokenizer, {"role": "assistant", "content": "1234"}, prompt=prompt)
    assert pairs[0].chosen_ids == full[-20:]  # the response, where a decoder reads its score
    _, counts = load(rows, max_length=20, overlong="drop")
    assert counts == {"rows": 1, "dropped_overlong": 1}


def test_without_a_template_the_contents_are_joined_with_special_tokens(tokenizer):
    plain = ids(tokenizer, {"role": "assistant", "content": "1234"}, chat_template=False)
    assert tokenizer.decode(plain) == "say abcd\n1234"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"prompt": "say a", "chosen": "1"}, "missing field 'rejected'"),
        (
            {
                "chosen": [{"role": "user", "content": "hi"}],
                "rejected": [{"role": "user", "content": "x"}],
            },
            "must end with the assistant",
        ),
        ({"prompt": "say a", "chosen": "1", "rejected": "x", "margin": -1}, "field 'margin'"),
        ({"prompt": "say a", "chosen": [{"content": "1"}], "rejected": "x"}, "chosen"),
    ],
)
def test_malformed_rows_are_named_or_skipped(load, row, message):
    good = {"prompt": "say b", "chosen": "2", "rejected": "y"}
    with pytest.raises(MalformedRow, match=rf"row 1 of .*pairs.jsonl.*{message}"):
        load([good, row], name="pairs.jsonl")
    pairs, counts = load([good, row], name="pairs.jsonl", malformed="skip")
    assert len(pairs) == 1 and counts["skipped_malformed"] == 1
