"""Fixtures of the trainer tests."""

import json
import random

import pytest


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rl-prompts")
    r = random.Random(0)
    rows = [
        {
            "data_source": "digits",
            "prompt": "say " + "".join(r.choice("abcdefgh") for _ in range(4)),
            "reward_model": {"ground_truth": ""},
        }
        for _ in range(256)
    ]
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "val.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[:16]))
    return folder
