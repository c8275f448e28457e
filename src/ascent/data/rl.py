"""RL prompts in verl's schema, and the seeded stream of them that a run consumes.

A row: ``data_source`` (str; picks the scorer), ``prompt`` (chat messages, or a string),
``reward_model.ground_truth`` (anything the scorer understands), optional ``extra_info``
(dict), ``ability`` and ``tools`` (tool definitions, as in SFT rows: the chat template shows
them with the prompt, and an agent's episode may call only those). Prompts are rendered with
the tokenizer's chat template (generation prompt added); those longer than
``max_prompt_length`` tokens are filtered out and counted. Chat prompts are checked and
rendered by ``ascent.data.chat``: a malformed one, or one the template refuses, is a
MalformedRow that names the row.
"""

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from ascent.batch import Batch
from ascent.data.chat import check_messages, check_tools, render_chat
from ascent.data.curriculum import PassRateConfig, PassRateSampler
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


class RLDataConfig(Strict):
    """Prompts for RL, in verl's parquet schema."""

    train_files: list[str] = Field(description="Parquet/JSONL files or datasets directories.")
    val_files: list[str] = Field(default_factory=list, description="Validation prompts.")
    prompts_per_step: int = Field(32, ge=1, description="Prompts per RL step (all ranks).")
    max_prompt_length: int = Field(512, ge=1, description="Longer prompts are filtered out.")
    chat_template: bool = Field(
        True,
        description="Render prompts with the tokenizer's chat template; false: the prompt is "
        "raw text, tokenized with the tokenizer's own special tokens (a base model's BOS).",
    )
    shuffle: bool = Field(True, description="Shuffle each epoch (seeded; sampler=uniform).")
    seed: int = Field(0, description="Seed of the prompt order.")
    sampler: Literal["uniform", "pass_rate"] = Field(
        "uniform",
        description="How a step's prompts are drawn: uniform (epoch after epoch, every prompt "
        "once each) or pass_rate (by each prompt's recent pass rate, fewer of those whose "
        "groups come back all right or all wrong: data.pass_rate, ascent.data.curriculum).",
    )
    pass_rate: PassRateConfig = Field(
        default_factory=PassRateConfig, description="sampler=pass_rate's settings (PassRateConfig)."
    )
    malformed: Literal["stop", "skip"] = Field(
        "stop", description="A malformed row stops loading with its location, or is skipped."
    )
    val_max_prompts: int | None = Field(
        None, ge=1, description="Use at most this many validation prompts."
    )
    tools_key: str = Field(
        "tools", description="Field with the row's tool definitions (optional; chat prompts)."
    )
    images_key: str = Field("images", description=IMAGES_HELP)
    max_image_pixels: int = Field(DEFAULT_MAX_PIXELS, ge=1, description=MAX_PIXELS_HELP)


@dataclass(frozen=True)
class RLPrompt:
    prompt_ids: list[int]
    data_source: str
    ground_truth: Any
    extra_info: dict = field(default_factory=dict)
    ability: str | None = None
    messages: list[dict] | None = None  # the chat prompt (an agent's environment starts here)
    tools: list[dict] | None = None  # the row's tool definitions (data.chat.check_tools form)
    prompt_id: str = ""  # where the row came from: "<file name>#<row>" (records of what trained)
    images: tuple[str, ...] = ()  # data URLs of the prompt's images, in order (ascent.vision)


PromptCheck = Callable[[RLPrompt], None]  # raises MalformedRow for a prompt a run cannot use


def row_prompt(
    row: Row,
    tokenizer: Any,
    config: RLDataConfig,
    check: PromptCheck | None = None,
    images: RowImages | None = None,
) -> RLPrompt:
    """The prompt of one row; MalformedRow names the row, the field and what is wrong.
    ``check`` adds the run's own conditions (such as tools an agent can run); ``images``:
    how a vision-language model takes the row's images (None: a text model)."""
    try:
        prompt = _prompt(row, tokenizer, config, images)
        if check is not None:
            check(prompt)
        return replace(prompt, prompt_id=f"{Path(row.source).name}#{row.index}")
    except MalformedRow as error:
        raise row.malformed(error) from error.__cause__  # keeps a template's own traceback


def _prompt(row: Row, tokenizer: Any, config: RLDataConfig, images: RowImages | None) -> RLPrompt:
    data = row.data
    for key in ("data_source", "prompt", "reward_model"):
        if key not in data or data[key] is None:
            raise MalformedRow(f"missing field {key!r} (verl schema)")
    reward_model = data["reward_model"]  # parquet fills a struct's absent keys with None
    if not isinstance(reward_model, dict) or reward_model.get("ground_truth") is None:
        raise MalformedRow("missing field 'reward_model.ground_truth'")
    prompt = data["prompt"]
    tools = data.get(config.tools_key)
    if tools is not None:
        tools = check_tools(tools, config.tools_key)
    urls = row_image_urls(row, config.images_key, images)
    if config.chat_template:
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        check_messages(prompt, "prompt")
        shown = prompt if images is None else image_messages(prompt, urls)
        text = render_chat(tokenizer, shown, tools=tools, generation=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if urls:
            ids = images.tokens(ids, urls)
    else:
        if urls:
            raise MalformedRow(
                "images are placed by the chat template: set data.chat_template=true"
            )
        if not isinstance(prompt, str):
            raise MalformedRow("field 'prompt' must be text when chat_template=false")
        if tools is not None:
            raise MalformedRow(
                f"field {config.tools_key!r}: tool definitions are shown by the chat template; "
                "set data.chat_template=true, or drop the field"
            )
        # As the model would read raw text anywhere else: a base model needs its BOS.
        ids = tokenizer(prompt)["input_ids"]
    extra = data.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise MalformedRow("field 'extra_info' must be a dict")
    return RLPrompt(
        list(ids),
        str(data["data_source"]),
        data["reward_model"]["ground_truth"],
        extra,
        data.get("ability"),
        prompt if config.chat_template else None,
        tools,
        images=tuple(urls),
    )


def load_rl_prompts(
    paths: list[str],
    tokenizer: Any,
    config: RLDataConfig,
    check: PromptCheck | None = None,
    images: RowImages | None = None,
) -> tuple[list[RLPrompt], Counter]:
    """Prompts of every row, and counts: rows, kept, too_long, skipped_malformed. A prompt
    that fails ``check`` is a malformed row; ``images`` as for ``row_prompt``."""
    counts: Counter = Counter()
    prompts = []
    for row in read_rows(paths):
        counts["rows"] += 1
        try:
            prompt = row_prompt(row, tokenizer, config, check, images)
        except MalformedRow:
            if config.malformed == "stop":
                raise
            counts["skipped_malformed"] += 1
            continue
        if len(prompt.prompt_ids) > config.max_prompt_length:
            counts["too_long"] += 1
            continue
        prompts.append(prompt)
        counts["kept"] += 1
    return prompts, counts


class PromptStream:
    """An endless, seeded stream of prompts: epoch after epoch, each shuffled by (seed, epoch).
    Its position (epoch, offset) is all a checkpoint needs to continue it exactly."""

    def __init__(self, prompts: list[RLPrompt], *, shuffle: bool, seed: int) -> None:
        if not prompts:
            raise ValueError("no prompts left to train on (check the data and the length filter)")
        self.prompts, self.shuffle, self.seed = prompts, shuffle, seed
        self.epoch, self.offset = 0, 0

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.prompts)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, count: int) -> list[RLPrompt]:
        taken: list[RLPrompt] = []
        while len(taken) < count:
            order = self._order(self.epoch)
            stop = min(len(order), self.offset + count - len(taken))
            taken.extend(self.prompts[i] for i in order[self.offset : stop])
            self.offset = stop
            if self.offset == len(order):
                self.epoch, self.offset = self.epoch + 1, 0
        return taken

    def observe(self, batch: Batch, weights: torch.Tensor | None) -> dict[str, float]:
        """A round's outcomes change nothing here (``PassRateSampler`` learns from them)."""
        return {}

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset}

    def load_state(self, state: dict[str, int]) -> None:
        if "epoch" not in state:
            raise ValueError(
                f"the checkpoint's prompt position {list(state)} is not data.sampler=uniform's: "
                "resume with the sampler it was saved with, or start a new run"
            )
        self.epoch, self.offset = state["epoch"], state["offset"]


def prompt_stream(
    prompts: list[RLPrompt], config: RLDataConfig, samples_per_prompt: int
) -> PromptStream | PassRateSampler:
    """The stream of training prompts that ``config.sampler`` names, seeded by ``config.seed``."""
    if config.sampler == "pass_rate":
        return PassRateSampler(
            prompts, config.pass_rate, samples_per_prompt=samples_per_prompt, seed=config.seed
        )
    return PromptStream(prompts, shuffle=config.shuffle, seed=config.seed)


def prompts_batch(prompts: list[RLPrompt], pad_id: int, uid_prefix: str) -> Batch:
    """``prompts`` (B, P) left-padded with ``prompt_mask``; per-row uid (this batch's group
    id), prompt_id (the data row), data_source, ground_truth, extra_info, raw_prompt, tools,
    images (a list of data URLs, empty for a text prompt)."""
    width = max(len(p.prompt_ids) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        n = len(prompt.prompt_ids)
        ids[row, width - n :] = torch.tensor(prompt.prompt_ids)
        mask[row, width - n :] = 1
    return Batch.from_dict(
        {
            "prompts": ids,
            "prompt_mask": mask,
            "uid": [f"{uid_prefix}-{i}" for i in range(len(prompts))],
            "prompt_id": [p.prompt_id for p in prompts],
            "data_source": [p.data_source for p in prompts],
            "ground_truth": [p.ground_truth for p in prompts],
            "extra_info": [p.extra_info for p in prompts],
            "raw_prompt": [p.messages for p in prompts],
            "tools": [p.tools for p in prompts],
            "images": [list(p.images) for p in prompts],
        }
    )
