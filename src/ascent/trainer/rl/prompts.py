"""An RL run's prompts, loaded and checked before any worker starts."""

from typing import Any

from ascent.data.images import row_images_for
from ascent.data.rl import PromptCheck, RLDataConfig, RLPrompt, load_rl_prompts
from ascent.engine.config import ModelConfig
from ascent.rewards.builtin import BUILTIN_NAMES, GIVE_A_SCORER, builtin_scorer
from ascent.rollout.backends import engine_capabilities, engines_with
from ascent.rollout.protocol import Capability
from ascent.trainer.run_dir import CannotStart


def load_run_prompts(
    data: RLDataConfig, tokenizer: Any, check: PromptCheck | None, model: ModelConfig
) -> tuple[list[RLPrompt], list[RLPrompt]]:
    """The training prompts and the validation prompts (at most ``data.val_max_prompts``),
    each row checked by ``check``, with their images when ``model`` is a vision-language
    model; their counts printed. Refuses a step larger than the data."""
    images = row_images_for(model.path, data.max_image_pixels, model.trust_remote_code)
    train, counts = load_rl_prompts(data.train_files, tokenizer, data, check, images)
    val, val_counts = load_rl_prompts(data.val_files, tokenizer, data, check, images)
    print(f"prompts: train {dict(counts)}; validation {dict(val_counts)}")
    if len(train) < data.prompts_per_step:
        raise CannotStart(
            f"data.prompts_per_step={data.prompts_per_step} is more than the "
            f"{len(train)} usable prompts of data.train_files ({dict(counts)}): every step "
            "would repeat prompts; lower data.prompts_per_step or add data"
        )
    return train, val[: data.val_max_prompts]


def check_images_reach_the_engine(prompts: list[RLPrompt], engine: str) -> None:
    """Prompts with images need an engine that takes them (an environment's episodes and an
    outside agent's calls take them: ``ascent.agents.images``, ``ascent.gateway``). Refused
    before any worker starts, not at the first generation."""
    if not any(p.images for p in prompts):
        return
    if Capability.IMAGES not in engine_capabilities(engine):
        raise CannotStart(
            f"the prompts hold images, which rollout.engine={engine} cannot generate from: "
            f"use rollout.engine={' or '.join(engines_with(Capability.IMAGES))}"
        )


def check_sources_are_scored(prompts: list[RLPrompt], function: str | None) -> None:
    """Without ``reward.function``, each row's ``data_source`` picks a built-in scorer: a
    source with none would score every one of its samples 0 for the whole run, so it is
    refused now, naming the source, where its rows are, and how to give a scorer."""
    if function is not None:
        return
    unscored: dict[str, list[str]] = {}
    for prompt in prompts:
        if builtin_scorer(prompt.data_source) is None:
            unscored.setdefault(prompt.data_source, []).append(prompt.prompt_id)
    if not unscored:
        return
    sources = "; ".join(
        f"{source!r} ({len(rows)} rows, first {rows[0]})" for source, rows in unscored.items()
    )
    raise CannotStart(
        f"no built-in scorer for data_source {sources}; the built-in ones are {BUILTIN_NAMES}. "
        f"Rename the source to one of them if it is that task, or {GIVE_A_SCORER}"
    )
