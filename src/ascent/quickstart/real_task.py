"""The real-model quickstart's task: "What is a + b? Answer with the number only." for
a in 1..30 and b in 1..9, asked through the model's own chat template (ChatML with
SmolLM2's default system prompt), scored by the built-in ``arithmetic`` reward (the last
number of the response equals a + b).

Why this task: SmolLM2-135M-Instruct knows small sums but rarely says them cleanly. Sampled
at temperature 1 it answers about one time in ten (it explains instead, runs past the
16-token limit, or writes a wrong sum); greedily, about one time in four. So a group of 8
samples often holds a correct answer beside wrong ones, which is what GRPO learns from, and
what there is to learn (answer, and answer right) shows in held-out greedy accuracy.
Two-digit sums were right 4-6% of the time at temperature 1 (too little signal on a CPU
budget); single-digit products 19%, but they are only 64 problems, too few to hold out from.

All 270 pairs are split once (seeded) into 64 held-out problems and the training pool.

A base model without a chat template (Gemma 3 270M) takes the same problems as raw text,
"a + b =" (``chat=False``), with generation stopped at the end of the line: greedy, it
answers about half of them right, sampled at temperature 1 about one in seven.
"""

import argparse
import json
import random
import shutil
from pathlib import Path

from ascent.models.gguf import packaged_checkpoint

Pair = tuple[int, int]
HELD_OUT = 64


def split_pairs(seed: int, held_out: int = HELD_OUT) -> tuple[list[Pair], list[Pair]]:
    """(training, held-out) pairs, disjoint, shuffled with ``seed``."""
    pairs = [(a, b) for a in range(1, 31) for b in range(1, 10)]
    random.Random(seed).shuffle(pairs)
    return pairs[held_out:], pairs[:held_out]


def question(pair: Pair) -> str:
    return f"What is {pair[0]} + {pair[1]}? Answer with the number only."


def raw_question(pair: Pair) -> str:
    return f"{pair[0]} + {pair[1]} ="


def rows(pairs: list[Pair], split: str, chat: bool = True) -> list[dict]:
    """verl's schema: chat messages as the prompt (the tokenizer's template renders them,
    adding its default system prompt), or with ``chat=False`` the raw text itself (for
    ``data.chat_template=false``); the sum as the ground truth."""
    return [
        {
            "data_source": "arithmetic",
            "prompt": (
                [{"role": "user", "content": question(pair)}] if chat else raw_question(pair)
            ),
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(pair[0] + pair[1])},
            "extra_info": {"split": split, "index": index, "a": pair[0], "b": pair[1]},
        }
        for index, pair in enumerate(pairs)
    ]


def write_task(directory: Path, seed: int, chat: bool = True) -> dict[str, str]:
    """``train.jsonl`` and ``held_out.jsonl`` in ``directory`` (chat or raw-text prompts:
    ``rows``); returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    train, held_out = split_pairs(seed)
    paths = {}
    for name, pairs in (("train", train), ("held_out", held_out)):
        path = directory / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows(pairs, name, chat)))
        paths[name] = str(path)
    return paths


def make_example(packaged: str, name: str, chat: bool, description: str) -> None:
    """An example script's whole job (``examples/make_*_data.py``): parse ``--root`` and
    ``--seed``, copy the packaged model ``packaged`` (converted once, then cached) to
    ROOT/models/``packaged`` and write the task (``chat``: chat or raw-text prompts) to
    ROOT/data/``name``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--root", default=".", help="directory the example's paths start from")
    parser.add_argument("--seed", type=int, default=0, help="seed of the held-out split")
    args = parser.parse_args()
    root = Path(args.root)
    model = root / "models" / packaged
    if not (model / "config.json").is_file():
        shutil.copytree(packaged_checkpoint(packaged), model)
    data = write_task(root / "data" / name, seed=args.seed, chat=chat)
    print(f"model: {model}\ndata: {data['train']}, {data['held_out']}")
