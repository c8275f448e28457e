"""The tools quickstart's task: a * b for a three-digit a and a two-digit b, which a tiny
model cannot compute but can look up: it may call ``multiply`` (a Hermes tool call) and then
answer with the number it got back.

    user:       123*45=
    assistant:  <tool_call>{"name":"multiply","arguments":{"a":123,"b":45}}</tool_call>
    tool:       5535
    assistant:  5535

Pairs are split once (seeded) into held-out, development and training sets. The SFT warm
start (``tools_warm_start``) learns from demonstrations with and without the tool; RL rewards
a right final answer.
The chat template is not shown the tool's schema (``rollout.agent.tools_in_prompt=false``):
the model learns the one tool from the demonstrations, and prompts stay short.
"""

import json
import random
from pathlib import Path

Pair = tuple[int, int]
SOURCE = "multiply_tool"


def multiply(a: int, b: int) -> int:
    """Multiply two integers exactly.

    Args:
        a: the first factor.
        b: the second factor.
    """
    return a * b


def split_pairs(
    seed: int, held_out: int = 500, dev: int = 200, train: int = 20_000
) -> tuple[list[Pair], list[Pair], list[Pair]]:
    rng = random.Random(seed)
    pairs = rng.sample([(a, b) for a in range(100, 1000) for b in range(10, 100)], train + 700)
    return pairs[held_out + dev :], pairs[held_out : held_out + dev], pairs[:held_out]


def question(pair: Pair) -> list[dict]:
    return [{"role": "user", "content": f"{pair[0]}*{pair[1]}="}]


def tool_call(pair: Pair) -> str:
    arguments = json.dumps({"a": pair[0], "b": pair[1]}, separators=(",", ":"))
    return f'<tool_call>{{"name":"multiply","arguments":{arguments}}}</tool_call>'


def demonstration(pair: Pair, use_tool: bool) -> list[dict]:
    """A conversation that answers ``pair`` right, with the tool or without it."""
    answer = str(pair[0] * pair[1])
    if not use_tool:
        return [*question(pair), {"role": "assistant", "content": answer}]
    return [
        *question(pair),
        {"role": "assistant", "content": tool_call(pair)},
        {"role": "tool", "content": answer},
        {"role": "assistant", "content": answer},
    ]


def final_answer(response: str) -> str:
    """The last assistant turn of a decoded episode (special tokens left out, so turns are
    separated by their role names)."""
    return response.rsplit("assistant\n", 1)[-1].strip()


def compute_score(
    data_source: str, solution_str: str, ground_truth: str, extra_info: object = None
) -> dict:
    """1 when the final answer is the product; ``used_tool`` says whether a call was made."""
    correct = final_answer(solution_str) == str(ground_truth)
    return {
        "score": float(correct),
        "acc": float(correct),
        "used_tool": float("<tool_call>" in solution_str),
    }


def write_rl_rows(path: Path, pairs: list[Pair]) -> str:
    with open(path, "w") as out:
        for pair in pairs:
            row = {
                "data_source": SOURCE,
                "prompt": question(pair),
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(pair[0] * pair[1])},
                "extra_info": {"a": pair[0], "b": pair[1]},
            }
            out.write(json.dumps(row) + "\n")
    return str(path)
