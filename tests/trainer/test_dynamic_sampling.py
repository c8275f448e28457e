"""DAPO's dynamic sampling on verl-schema GSM8K-style rows (chat messages, parquet): refill
rounds whose prompts pad to different widths concatenate into one step, and a step where no
group has signal says so and skips its update."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric

QUESTIONS = [  # from short to long: each refill round pads its prompts to its own width
    "What is {n} + 1?",
    "Weng earns ${n} an hour for babysitting. How much did she earn?",
    "Natalia sold clips to {n} of her friends in April, and then she sold half as many clips "
    "in May. How many clips did Natalia sell altogether in April and May?",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money "
    "she needs. Her parents decided to give her ${n} for that purpose, and her grandparents "
    "twice as much as her parents. How much more money does Betty need to buy the wallet?",
]
ROUND = 8  # data.prompts_per_step: one round of prompts


@pytest.fixture(scope="module")
def gsm8k_parquet(tmp_path_factory):
    """Rows as verl's gsm8k preprocessing writes them, in blocks of one round each (the data
    is not shuffled): every block has its own prompt length and one hopeless prompt, so every
    step needs a refill round and its rounds have different widths."""
    rows = []
    for index in range(8 * ROUND):
        block, position = divmod(index, ROUND)
        question = QUESTIONS[block % len(QUESTIONS)].format(n=index + 2)
        instruction = 'Let\'s think step by step and output the final answer after "####".'
        rows.append(
            {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": f"{question} {instruction}"}],
                "ability": "math",
                "reward_model": {
                    "style": "rule",
                    "ground_truth": "hopeless" if position == 0 else str(index),
                },
                "extra_info": {"split": "train", "index": index, "question": question},
            }
        )
    folder = tmp_path_factory.mktemp("gsm8k")
    pq.write_table(pa.Table.from_pylist(rows), folder / "train.parquet")
    return folder


def dapo(tiny_model, data, run_dir, *overrides):
    return config(
        tiny_model,
        data,
        run_dir,
        "algorithm.name=dapo",
        f"data.train_files=[{data / 'train.parquet'}]",
        "data.val_files=[]",
        "data.chat_template=true",
        "data.max_prompt_length=400",
        f"data.prompts_per_step={ROUND}",
        "data.shuffle=false",
        "rollout.samples_per_prompt=4",
        "algorithm.max_generation_rounds=6",
        *overrides,
    )


def test_refill_rounds_of_different_prompt_widths_make_one_step(
    tiny_model, gsm8k_parquet, tmp_path
):
    result = train_rl(
        dapo(
            tiny_model,
            gsm8k_parquet,
            tmp_path,
            "reward.function=tests.trainer.scorers:has_digit",
            "trainer.total_steps=3",
        )
    )
    assert result["steps"] == 3
    assert all(rounds >= 2 for rounds in metric(tmp_path, "dynamic_sampling/rounds"))
    assert all(groups >= ROUND / 2 for groups in metric(tmp_path, "dynamic_sampling/groups"))
    assert all(norm > 0 for norm in metric(tmp_path, "actor/grad_norm"))


def test_a_step_without_signal_skips_its_update_and_says_so(
    tiny_model, gsm8k_parquet, tmp_path, capsys
):
    result = train_rl(
        dapo(
            tiny_model,
            gsm8k_parquet,
            tmp_path,
            "reward.function=tests.trainer.scorers:always_wrong",
            "algorithm.max_generation_rounds=2",
            "trainer.total_steps=2",
        )
    )
    assert result["steps"] == 2
    assert metric(tmp_path, "dynamic_sampling/groups") == [0.0, 0.0]
    assert "no group with signal" in capsys.readouterr().out
