"""The quickstart's task: a + b for two-digit a and b, answered with the number.

All 8,100 pairs are split once (seeded) into a held-out set (scored before and after RL),
a development set (to stop the SFT warm start) and the training pool (SFT and RL prompts).
Rows are written in verl's schema (with a plain-text prompt, ``data.chat_template=false``),
scored by the built-in ``arithmetic`` reward.
"""

import json
import random
from pathlib import Path

Pair = tuple[int, int]


def split_pairs(
    seed: int, held_out: int = 500, dev: int = 200
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(seed).shuffle(pairs)
    return pairs[held_out + dev :], pairs[held_out : held_out + dev], pairs[:held_out]


def question(pair: Pair) -> str:
    """The prompt, as plain text (no chat template: a few tokens, so steps stay fast)."""
    return f"{pair[0]}+{pair[1]}="


def answer(pair: Pair) -> str:
    return str(pair[0] + pair[1])


def write_rl_rows(path: Path, pairs: list[Pair]) -> str:
    with open(path, "w") as out:
        for pair in pairs:
            row = {
                "data_source": "arithmetic",
                "prompt": question(pair),
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer(pair)},
                "extra_info": {"a": pair[0], "b": pair[1]},
            }
            out.write(json.dumps(row) + "\n")
    return str(path)
