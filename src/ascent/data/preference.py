"""Preference pairs for reward-model training, and how a reward model reads a conversation.

A row: ``chosen`` and ``rejected``, each a conversation (chat messages ending with the
assistant's response), or, when the row has a ``prompt`` (messages or a string), each the
response alone (a string, or the assistant's messages). An optional ``margin`` (a number
>= 0) asks the chosen score to exceed the rejected by it (``ascent.algos.bradley_terry``).

``reward_model_ids`` is the one rendering of a conversation for a reward model, used both
when it is trained (``ascent rm``) and when it scores rollouts (the reward-model role), so
the model is asked exactly what it learned to answer: with the reward model's own chat
template (special tokens as the template writes them), or, without one, the messages'
contents joined by newlines and tokenized with the tokenizer's special tokens (an encoder's
[CLS] ... [SEP]). A conversation longer than ``max_length`` keeps its last tokens (the
response, where a decoder pools its score) and is counted as truncated.
"""

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ascent.data.chat import check_messages, render_chat
from ascent.data.files import MalformedRow, Row, read_rows
from ascent.engine.config import Strict


class PreferenceDataConfig(Strict):
    """Preference pairs: where they are and how they become token sequences."""

    train_files: list[str] = Field(description="Parquet/JSONL files or datasets directories.")
    val_files: list[str] = Field(default_factory=list, description="Held-out pairs.")
    chat_template: bool = Field(
        True,
        description="Render with the reward model's chat template (false: contents joined "
        "by newlines).",
    )
    max_length: int = Field(1024, ge=2, description="Tokens per conversation (longer: cut).")
    overlong: Literal["truncate", "drop"] = Field(
        "truncate", description="Longer pairs keep their last max_length tokens, or are dropped."
    )
    malformed: Literal["stop", "skip"] = Field(
        "stop", description="A malformed row stops loading with its location, or is skipped."
    )


@dataclass(frozen=True)
class PreferencePair:
    chosen_ids: list[int]
    rejected_ids: list[int]
    margin: float = 0.0
    weight: float = 1.0  # 0: a padding pair that weighs nothing


def reward_model_ids(
    tokenizer: Any, messages: list[dict], *, chat_template: bool, max_length: int
) -> tuple[list[int], bool]:
    """The token ids a reward model scores for ``messages``, and whether they were cut."""
    if chat_template:
        text = render_chat(tokenizer, messages, generation=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        text = "\n".join(str(message["content"]) for message in messages)
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    if len(ids) > max_length:
        return list(ids[-max_length:]), True
    return list(ids), False


def _conversation(prompt: Any, side: Any, key: str) -> list[dict]:
    if prompt is None:
        check_messages(side, key)
        return list(side)
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    check_messages(turns, "prompt")
    response = [{"role": "assistant", "content": side}] if isinstance(side, str) else list(side)
    check_messages(response, key)
    return turns + response


def _row_pair(data: dict, tokenizer: Any, config: PreferenceDataConfig) -> tuple:
    for key in ("chosen", "rejected"):
        if data.get(key) is None:
            raise MalformedRow(f"missing field {key!r} (preference rows need chosen and rejected)")
    prompt = data.get("prompt")
    sides = []
    for key in ("chosen", "rejected"):
        messages = _conversation(prompt, data[key], key)
        if messages[-1].get("role") != "assistant":
            raise MalformedRow(f"field {key!r} must end with the assistant's response")
        sides.append(
            reward_model_ids(
                tokenizer,
                messages,
                chat_template=config.chat_template,
                max_length=config.max_length,
            )
        )
    margin = data.get("margin")
    margin = 0.0 if margin is None else margin
    if not isinstance(margin, int | float) or not math.isfinite(margin) or margin < 0:
        raise MalformedRow(f"field 'margin' must be a finite number >= 0, not {margin!r}")
    (chosen, cut_c), (rejected, cut_r) = sides
    return PreferencePair(chosen, rejected, float(margin)), cut_c or cut_r


def load_preference_pairs(
    paths: list[str], tokenizer: Any, config: PreferenceDataConfig
) -> tuple[list[PreferencePair], Counter]:
    """The pairs of every row, and counts: rows, kept, truncated, dropped_overlong,
    skipped_malformed."""
    counts: Counter = Counter()
    pairs = []
    for row in read_rows(paths):
        counts["rows"] += 1
        try:
            pair, cut = _checked_pair(row, tokenizer, config)
        except MalformedRow:
            if config.malformed == "stop":
                raise
            counts["skipped_malformed"] += 1
            continue
        if cut:
            if config.overlong == "drop":
                counts["dropped_overlong"] += 1
                continue
            counts["truncated"] += 1
        pairs.append(pair)
        counts["kept"] += 1
    return pairs, counts


def _checked_pair(row: Row, tokenizer: Any, config: PreferenceDataConfig) -> tuple:
    try:
        return _row_pair(row.data, tokenizer, config)
    except MalformedRow as error:
        raise row.malformed(error) from error.__cause__
