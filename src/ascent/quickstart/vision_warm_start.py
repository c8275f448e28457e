"""The vision quickstart's warm start: it teaches the answer's form, not the colours.

SFT pairs every picture with a colour drawn at random (seeded), through the same data path
as any image row (``ascent.data``), until the model answers the development pictures with
one of the four colour names, decoding greedily, nearly always. The labels say nothing about
the pictures, so the model cannot learn from them which colour a picture shows: it leaves
the warm start naming colours confidently and right about one time in four, and everything
it then learns about the pictures, it learns from GRPO's reward.

Why not SFT on the true colours, stopped early as the addition quickstart does: the model
learns the colours as fast as it learns to spell them, so stopped at 35-50% accuracy it still
spells badly (4 nats of entropy a token): sampled responses were almost never a colour name,
every reward was 0, and GRPO had nothing to learn from.
"""

import random

from ascent.data.files import Row
from ascent.data.images import row_images_for
from ascent.data.rl import RLDataConfig, prompts_batch, row_prompt
from ascent.data.sft import SFTDataConfig, row_example
from ascent.quickstart.vision_task import COLOURS, Picture, answer, row
from ascent.quickstart.warm_start import WarmStartTask
from ascent.rollout.types import response_lengths


def examples(tokenizer: object, model_dir: str, pictures: list[Picture], seed: int = 0) -> list:
    """SFT examples: the question over the picture, answered with a colour drawn at random."""
    images = row_images_for(model_dir)
    config = SFTDataConfig(train_files=[])
    rng = random.Random(seed)
    out = []
    for index, picture in enumerate(pictures):
        data = row(picture)
        label = rng.choice(list(COLOURS))
        data = {"prompt": data["prompt"], "response": label, "images": data["images"]}
        out.append(row_example(Row(data, "warm-start", index), tokenizer, config, images))
    return out


def prompts(
    tokenizer: object, model_dir: str, pictures: list[Picture], blank: bool = False
) -> list:
    """The RL prompts of ``pictures`` (their rows, rendered as a run renders them)."""
    images = row_images_for(model_dir)
    config = RLDataConfig(train_files=[])
    return [
        row_prompt(Row(row(p, blank), "pictures", i), tokenizer, config, images=images)
        for i, p in enumerate(pictures)
    ]


def greedy_answers(
    rollout: object,
    tokenizer: object,
    model_dir: str,
    pictures: list[Picture],
    blank: bool = False,
    temperature: float = 0.0,
) -> list[str]:
    """The model's answer to each picture, greedy or sampled at ``temperature`` (seeded)
    (``blank``: each picture replaced by an empty one)."""
    rows = prompts(tokenizer, model_dir, pictures, blank)
    sampling = {"n": 1, "temperature": temperature, "seed": 0}
    out = rollout.generate(prompts_batch(rows, tokenizer.pad_token_id, "dev"), sampling=sampling)
    return [
        tokenizer.decode(out["responses"][i][:length].tolist(), skip_special_tokens=True).strip()
        for i, length in enumerate(response_lengths(out).tolist())
    ]


def greedy_accuracy(
    rollout: object,
    tokenizer: object,
    model_dir: str,
    pictures: list[Picture],
    blank: bool = False,
) -> float:
    """Share of ``pictures`` whose colour the model names, decoding greedily."""
    answers = greedy_answers(rollout, tokenizer, model_dir, pictures, blank)
    return sum(a == answer(p) for a, p in zip(answers, pictures, strict=True)) / len(pictures)


def named_a_colour(
    rollout: object, tokenizer: object, model_dir: str, pictures: list[Picture]
) -> float:
    """Share of answers sampled at temperature 1, as RL samples them, that are one of the
    colour names (right or not). Greedy answers name a colour well before sampled ones do:
    stopped there, RL's samples were mostly misspelt, and it learnt to spell one colour."""
    answers = greedy_answers(rollout, tokenizer, model_dir, pictures, temperature=1.0)
    return sum(a in COLOURS for a in answers) / len(pictures)


def vision_warm_start(model_dir: str, seed: int) -> WarmStartTask:
    """The warm start's task for the model at ``model_dir`` (its image processor)."""
    return WarmStartTask(
        examples=lambda tokenizer, pictures: examples(tokenizer, model_dir, pictures, seed),
        accuracy=lambda rollout, tokenizer, pictures: named_a_colour(
            rollout, tokenizer, model_dir, pictures
        ),
        rollout={"max_model_len": 128},
        measure="sampled answers that name a colour",
    )
