"""An RL run's prompts, loaded and checked before any worker starts."""

from typing import Any

from ascent.data.rl import PromptCheck, RLDataConfig, RLPrompt, load_rl_prompts
from ascent.trainer.run_dir import CannotStart


def load_run_prompts(
    data: RLDataConfig, tokenizer: Any, check: PromptCheck | None
) -> tuple[list[RLPrompt], list[RLPrompt]]:
    """The training prompts and the validation prompts (at most ``data.val_max_prompts``),
    each row checked by ``check``; their counts printed. Refuses a step larger than the
    data."""
    train, counts = load_rl_prompts(data.train_files, tokenizer, data, check)
    val, val_counts = load_rl_prompts(data.val_files, tokenizer, data, check)
    print(f"prompts: train {dict(counts)}; validation {dict(val_counts)}")
    if len(train) < data.prompts_per_step:
        raise CannotStart(
            f"data.prompts_per_step={data.prompts_per_step} is more than the "
            f"{len(train)} usable prompts of data.train_files ({dict(counts)}): every step "
            "would repeat prompts; lower data.prompts_per_step or add data"
        )
    return train, val[: data.val_max_prompts]
