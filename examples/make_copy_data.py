"""Make what examples/sft_copy.yaml names: a tiny chat model and the copy task's data.

    python examples/make_copy_data.py            # then:
    ascent sft examples/sft_copy.yaml

writes, relative to the current directory (or --root):
  runs/tiny-model/        a randomly initialised 2-layer Qwen2-shaped model with a byte-level
                          tokenizer and a ChatML-style chat template
                          (ascent.models.build_tiny_model)
  data/copy_train.jsonl   2,000 conversations: the user says "repeat <word>", the assistant
  data/copy_val.jsonl     answers <word> (3-4 letters of a-h); 64 held-out ones
Nothing is downloaded. With a real model, point model.path and data.* at your own instead.
"""

import argparse
import json
import random
from pathlib import Path

from ascent.models import build_tiny_model


def copy_rows(count: int, seed: int) -> list[dict]:
    """``count`` chat rows of the copy task, drawn with ``seed``."""
    draw = random.Random(seed)
    rows = []
    for _ in range(count):
        word = "".join(draw.choice("abcdefgh") for _ in range(draw.randint(3, 4)))
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"repeat {word}"},
                    {"role": "assistant", "content": word},
                ]
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=".", help="directory the example's paths start from")
    root = Path(parser.parse_args().root)
    model = build_tiny_model(root / "runs" / "tiny-model", seed=0)
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name, count, seed in (("copy_train", 2000, 0), ("copy_val", 64, 1)):
        with open(data / f"{name}.jsonl", "w") as out:
            out.writelines(json.dumps(row) + "\n" for row in copy_rows(count, seed))
    print(f"model: {model}\ndata: {data / 'copy_train.jsonl'}, {data / 'copy_val.jsonl'}")


if __name__ == "__main__":
    main()
