"""SFT examples: token ids and a loss mask that covers exactly the assistant's tokens.

Chat rows (``messages``, optionally ``tools``) are rendered with the tokenizer's own chat
template. The loss mask comes from rendering the conversation once in full and once per
assistant turn up to it: turn i spans the characters from the end of
``render(messages[:i], add_generation_prompt=True)`` to the end of ``render(messages[:i+1])``
(its content and end-of-turn marker), and a token carries loss when it starts inside such a
span. Every assistant turn is trained; system, user and tool turns, and the assistant
headers, are not. A template that does not render conversations prefix by prefix (some
rewrite earlier turns) is refused with the row named, rather than trained with a wrong mask.
Messages are checked, and a conversation the template refuses is reported, by
``ascent.data.chat``.

Prompt/response rows become a user turn and an assistant turn; with ``template: none`` they
are plain prompt + response + EOS, the loss on response and EOS.
"""

from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ascent.data.chat import check_messages, check_tools, render_chat
from ascent.data.files import MalformedRow, Row, read_rows
from ascent.data.images import (
    IMAGES_HELP,
    MAX_PIXELS_HELP,
    RowImages,
    image_messages,
    row_image_urls,
)
from ascent.engine.config import Strict
from ascent.vision.images import DEFAULT_MAX_PIXELS
from ascent.vision.prompts import repeat_per_token


class SFTDataConfig(Strict):
    """Where the SFT data is and how rows become token sequences."""

    train_files: list[str] = Field(description="Parquet/JSONL files or datasets directories.")
    val_files: list[str] = Field(default_factory=list, description="Validation data, same forms.")
    template: Literal["chat", "none"] = Field(
        "chat", description="chat: the tokenizer's chat template; none: prompt + response + EOS."
    )
    messages_key: str = Field("messages", description="Field with the chat messages.")
    tools_key: str = Field("tools", description="Field with tool definitions (optional).")
    prompt_key: str = Field("prompt", description="Prompt field of prompt/response rows.")
    response_key: str = Field("response", description="Response field of prompt/response rows.")
    max_length: int = Field(1024, ge=2, description="Tokens per example (prompt + response).")
    overlong: Literal["truncate", "drop"] = Field(
        "truncate", description="Longer examples are cut to max_length, or dropped."
    )
    malformed: Literal["stop", "skip"] = Field(
        "stop", description="A malformed row stops loading with its location, or is skipped."
    )
    images_key: str = Field("images", description=IMAGES_HELP)
    max_image_pixels: int = Field(DEFAULT_MAX_PIXELS, ge=1, description=MAX_PIXELS_HELP)


@dataclass(frozen=True)
class SFTExample:
    input_ids: list[int]
    loss_mask: list[int]  # 1 on tokens the model learns to predict (never the first token)
    images: tuple[str, ...] = ()  # data URLs of the images whose tokens input_ids holds


def with_images(example: SFTExample, urls: list[str], images: "RowImages | None") -> SFTExample:
    """The example with its image tokens expanded (none to expand for a text model)."""
    if images is None:
        return example
    repeats = images.repeats(example.input_ids, urls)
    return SFTExample(
        repeat_per_token(example.input_ids, repeats),
        repeat_per_token(example.loss_mask, repeats),
        tuple(urls),
    )


def chat_example(tokenizer: Any, messages: list[dict], tools: list | None = None) -> SFTExample:
    """Token ids of the rendered conversation and its assistant-token loss mask.

    An assistant turn's span runs from the end of the generation prompt to the end of the
    turn as the template renders it: the tokens RL samples (``ascent.agents.conversation``,
    the same ``render_chat``) and, after the end-of-turn token, whatever the template writes
    there (ChatML's "\n"), which inference never samples."""
    full = render_chat(tokenizer, messages, tools=tools, generation=False)
    spans = []
    for turn, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        if turn == 0:  # its span would start after an empty conversation, which cannot render
            raise MalformedRow(
                "the conversation opens with an assistant turn: put a system or user message "
                "before it"
            )
        start = len(render_chat(tokenizer, messages[:turn], tools=tools, generation=True))
        upto = render_chat(tokenizer, messages[: turn + 1], tools=tools, generation=False)
        if not full.startswith(upto) or start > len(upto):
            raise MalformedRow(
                "the chat template renders this conversation differently prefix by prefix "
                f"(turn {turn}), so the assistant tokens cannot be located reliably"
            )
        spans.append((start, len(upto)))
    if not spans:
        raise MalformedRow("the conversation has no assistant turn: nothing to learn from")
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(s <= begin < e for s, e in spans)) for begin, _ in encoded["offset_mapping"]]
    mask[0] = 0  # the first token has nothing before it to be predicted from
    return SFTExample(list(encoded["input_ids"]), mask)


def plain_example(tokenizer: Any, prompt: str, response: str) -> SFTExample:
    """Raw text: the prompt with the tokenizer's own special tokens (a base model's BOS, as
    RL reads raw prompts), the response after it, then EOS."""
    prompt_ids = tokenizer(prompt)["input_ids"]
    response_ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    response_ids = [*response_ids, tokenizer.eos_token_id]
    mask = [0] * len(prompt_ids) + [1] * len(response_ids)
    mask[0] = 0
    return SFTExample([*prompt_ids, *response_ids], mask)


def row_example(
    row: Row, tokenizer: Any, config: SFTDataConfig, images: RowImages | None = None
) -> SFTExample:
    """The example of one row; MalformedRow names the row and the field. ``images``: how a
    vision-language model takes the row's images (None: a text model)."""
    try:
        return _example(row, tokenizer, config, images)
    except MalformedRow as error:
        raise row.malformed(error) from error.__cause__  # keeps a template's own traceback


def _example(
    row: Row, tokenizer: Any, config: SFTDataConfig, images: RowImages | None
) -> SFTExample:
    data = row.data
    urls = row_image_urls(row, config.images_key, images)

    def shown(messages: list[dict]) -> list[dict]:
        return messages if images is None else image_messages(messages, urls)

    if config.messages_key in data and data[config.messages_key] is not None:
        messages = data[config.messages_key]
        check_messages(messages, config.messages_key)
        if config.template == "none":
            raise MalformedRow("template 'none' takes prompt/response rows, not messages")
        tools = data.get(config.tools_key)
        if tools is not None:
            tools = check_tools(tools, config.tools_key)
        return with_images(chat_example(tokenizer, shown(messages), tools), urls, images)
    for key in (config.prompt_key, config.response_key):
        if key not in data:
            raise MalformedRow(
                f"missing field {key!r} (rows need {config.messages_key!r}, or "
                f"{config.prompt_key!r} and {config.response_key!r})"
            )
    prompt, response = data[config.prompt_key], data[config.response_key]
    if not isinstance(response, str):
        raise MalformedRow(f"field {config.response_key!r} must be a string")
    if config.template == "none":
        if not isinstance(prompt, str):
            raise MalformedRow(f"field {config.prompt_key!r} must be a string")
        if urls:
            raise MalformedRow("images are placed by the chat template: use data.template=chat")
        return plain_example(tokenizer, prompt, response)
    turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    check_messages(turns, config.prompt_key)
    conversation = shown([*turns, {"role": "assistant", "content": response}])
    return with_images(chat_example(tokenizer, conversation), urls, images)


def load_sft_examples(
    paths: list[str], tokenizer: Any, config: SFTDataConfig, images: RowImages | None = None
) -> tuple[list[SFTExample], Counter]:
    """Examples of every row, and counts of what happened to the rows (reported to the user):
    rows, kept, truncated, dropped_overlong, dropped_no_loss, skipped_malformed. An example
    with images is dropped rather than cut (a cut image would not match its tokens)."""
    counts: Counter = Counter()
    examples = []
    for row in read_rows(paths):
        counts["rows"] += 1
        try:
            example = row_example(row, tokenizer, config, images)
        except MalformedRow:
            if config.malformed == "stop":
                raise
            counts["skipped_malformed"] += 1
            continue
        if len(example.input_ids) > config.max_length:
            if config.overlong == "drop" or example.images:
                counts["dropped_overlong"] += 1
                continue
            counts["truncated"] += 1
            example = SFTExample(
                example.input_ids[: config.max_length], example.loss_mask[: config.max_length]
            )
            if not any(example.loss_mask):
                counts["dropped_no_loss"] += 1
                continue
        examples.append(example)
        counts["kept"] += 1
    return examples, counts
