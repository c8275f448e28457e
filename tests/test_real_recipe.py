"""The real-model recipe: its task splits held-out problems from training ones, its rows are
chat prompts in verl's schema scored by the built-in ``arithmetic`` rule, and the example
config for ``ascent train`` is the quickstart's recipe, value for value."""

import json
from pathlib import Path

from ascent.config import load_config
from ascent.quickstart.real import STEPS, real_overrides
from ascent.quickstart.real_task import HELD_OUT, split_pairs, write_task
from ascent.rewards.builtin import arithmetic
from ascent.trainer.rl.config import RLConfig

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_grpo_smollm2.yaml"


def test_the_example_config_is_the_quickstarts_recipe():
    example = load_config(RLConfig, EXAMPLE)
    assert load_config(RLConfig, EXAMPLE, real_overrides(seed=0, steps=STEPS)) == example


def test_held_out_problems_never_train_and_rows_are_chat_prompts(tmp_path):
    train, held_out = split_pairs(seed=3)
    assert len(held_out) == HELD_OUT and not set(train) & set(held_out)
    assert len(train) + len(held_out) == 270
    assert split_pairs(seed=3) == (train, held_out) != split_pairs(seed=4)
    paths = write_task(tmp_path, seed=3)
    rows = [json.loads(line) for line in Path(paths["held_out"]).read_text().splitlines()]
    a, b = held_out[0]
    assert rows[0]["prompt"] == [
        {"role": "user", "content": f"What is {a} + {b}? Answer with the number only."}
    ]
    truth = rows[0]["reward_model"]["ground_truth"]
    assert rows[0]["data_source"] == "arithmetic" and truth == str(a + b)
    assert arithmetic(f"{a} + {b} = {a + b}", truth)["score"] == 1.0
    assert arithmetic(f"The answer is {a + b + 1}.", truth)["score"] == 0.0
