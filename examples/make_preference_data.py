"""Make what examples/rm_digits.yaml and train_ppo_rm_digits.yaml name: a tiny model,
preference pairs that follow a hidden rule, and prompts.

    python examples/make_preference_data.py      # then:
    ascent rm examples/rm_digits.yaml
    ascent train examples/train_ppo_rm_digits.yaml

writes, relative to the current directory (or --root):
  runs/tiny-model/          a randomly initialised 2-layer Qwen2-shaped model with a byte-level
                            tokenizer and a ChatML-style chat template
  data/prefs_train.jsonl    4,000 pairs: the user says "say <4 letters>", two responses of
  data/prefs_val.jsonl      1-8 characters; chosen is the one with the larger share of
                            digits (the hidden rule; ties are not drawn); 256 held-out pairs.
                            A third of the responses mix digits with what an untrained
                            byte-level policy writes (invalid bytes, control characters), so
                            the reward model has seen it
  data/digits_prompts.jsonl RL prompts of the same form (verl schema), scored for the record
                            by that rule, to train a policy against the reward model
Nothing is downloaded. With real data, point model.path and data.* at your own instead.
"""

import argparse
import json
import random
from pathlib import Path

from ascent.models import build_tiny_model

READABLE = "abcdefghijklmnopqrstuvwxyz ABCDEFGH.,!?-_+=()"
# What a byte-level policy emits before it learns anything: bytes that are not UTF-8 (decoded
# as U+FFFD, three bytes for the reward model) and control characters. A reward model that
# never saw them scores them at random, and PPO finds the ones it scores like digits.
UNREADABLE = "\ufffd" * 8 + "".join(map(chr, range(32)))


def digit_share(text: str) -> float:
    """The hidden rule: the share of characters that are digits."""
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def compute_score(
    data_source: str, solution_str: str, ground_truth: object, extra_info: dict | None
) -> float:
    """The hidden rule as a verl-signature reward function, for measuring it on the side
    (examples/train_ppo_rm_digits.yaml, reward.function_weight=0)."""
    return digit_share(solution_str)


def _response(draw: random.Random) -> str:
    """1-8 characters, each a digit with a probability drawn per response; the others are
    readable in two responses of three, unreadable in the third."""
    p = draw.random()
    others = UNREADABLE if draw.random() < 1 / 3 else READABLE
    return "".join(
        draw.choice("0123456789") if draw.random() < p else draw.choice(others)
        for _ in range(draw.randint(1, 8))
    )


def _prompt(draw: random.Random) -> str:
    return "say " + "".join(draw.choice("abcdefgh") for _ in range(4))


def preference_rows(count: int, seed: int) -> list[dict]:
    """``count`` preference rows (prompt, chosen, rejected) drawn with ``seed``."""
    draw = random.Random(seed)
    rows = []
    while len(rows) < count:
        a, b = _response(draw), _response(draw)
        if digit_share(a) == digit_share(b):
            continue
        chosen, rejected = (a, b) if digit_share(a) > digit_share(b) else (b, a)
        rows.append({"prompt": _prompt(draw), "chosen": chosen, "rejected": rejected})
    return rows


def prompt_rows(count: int, seed: int) -> list[dict]:
    """RL prompts in verl's schema (the ground truth is unused by the rule)."""
    draw = random.Random(seed)
    return [
        {"data_source": "digits", "prompt": _prompt(draw), "reward_model": {"ground_truth": ""}}
        for _ in range(count)
    ]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".", help="directory the example's paths start from")
    root = Path(parser.parse_args().root)
    model = build_tiny_model(root / "runs" / "tiny-model", seed=0)
    data = root / "data"
    write_jsonl(data / "prefs_train.jsonl", preference_rows(4000, seed=0))
    write_jsonl(data / "prefs_val.jsonl", preference_rows(256, seed=1))
    write_jsonl(data / "digits_prompts.jsonl", prompt_rows(512, seed=2))
    print(f"model: {model}\ndata: {data}")


if __name__ == "__main__":
    main()
