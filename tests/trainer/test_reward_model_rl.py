"""Model rewards end to end: ``ascent rm`` trains a reward model on pairs that follow a hidden
rule (the larger share of digits wins) to >= 90% held-out pairwise accuracy; PPO against it
raises the rule's true satisfaction on held-out prompts on three seeds, and so does SPPO with
the reward model as its preference model; the reward combines the function's and the model's
scores by their weights, the model scoring the conversation as transformers does; and the
reward model runs on devices of its own."""

import json
from pathlib import Path

import pytest
import torch
from examples.make_preference_data import digit_share, preference_rows, prompt_rows, write_jsonl
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from ascent.batch import Batch
from ascent.cli import main
from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric
from tests.trainer.test_export import same_weights

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rm_digits.yaml"


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """Preference pairs, and prompts (train / held-out)."""
    folder = tmp_path_factory.mktemp("digits")
    write_jsonl(folder / "prefs_train.jsonl", preference_rows(4000, seed=0))
    write_jsonl(folder / "prefs_val.jsonl", preference_rows(256, seed=1))
    prompts = prompt_rows(512, seed=2)
    write_jsonl(folder / "prompts" / "train.jsonl", prompts[:480])
    write_jsonl(folder / "prompts" / "val.jsonl", prompts[480:])
    return folder


def rm_run(tiny_model, digits, run_dir, *overrides):
    """``ascent rm`` with the example's config on the digits pairs."""
    code = main(
        [
            "rm",
            str(EXAMPLE),
            f"model.path={tiny_model}",
            f"data.train_files=[{digits / 'prefs_train.jsonl'}]",
            f"data.val_files=[{digits / 'prefs_val.jsonl'}]",
            f"trainer.run_dir={run_dir}",
            "trainer.progress_bar=false",
            "tracking.sinks=[jsonl]",
            *overrides,
        ]
    )
    assert code == 0
    return run_dir


@pytest.fixture(scope="module")
def reward_model(tiny_model, digits):
    return rm_run(tiny_model, digits, digits / "rm", "trainer.epochs=1")  # 0.98 held out


@pytest.mark.learning
def test_ascent_rm_ranks_held_out_pairs(reward_model):
    accuracy = metric(reward_model, "val/accuracy")
    assert accuracy[0] < 0.75 and accuracy[-1] >= 0.9, accuracy
    model = AutoModelForSequenceClassification.from_pretrained(reward_model / "hf")
    assert model.config.num_labels == 1  # a transformers reward model


def test_ascent_export_of_a_reward_model_checkpoint_is_the_runs_reward_model(
    reward_model, tmp_path
):
    out = tmp_path / "exported"
    assert main(["export", str(reward_model), str(out)]) == 0
    assert same_weights(out, reward_model / "hf")
    assert AutoModelForSequenceClassification.from_pretrained(out).config.num_labels == 1


def test_a_lora_reward_model_exports_merged_and_refuses_an_adapter_export(
    tiny_model, digits, tmp_path, capsys
):
    """The score head trains whole beside the adapters, so an adapter alone would load on
    the base model with an untrained head: only the merged export is offered."""
    run = rm_run(tiny_model, digits, tmp_path / "run", "model.lora.rank=4", "trainer.max_steps=3")
    out = tmp_path / "merged"
    assert main(["export", str(run), str(out)]) == 0
    assert same_weights(out, run / "hf")
    assert main(["export", str(run), str(tmp_path / "adapter"), "--lora", "adapter"]) == 2
    assert "score head trains whole" in capsys.readouterr().err
    assert not (tmp_path / "adapter").exists()


def rl_config(tiny_model, digits, run_dir, reward_model, *overrides):
    return config(
        tiny_model,
        digits / "prompts",
        run_dir,
        "reward.function_weight=0",  # the rule is only measured
        f"reward_model.model.path={reward_model / 'hf'}",
        *overrides,
    )


def validated_run(tiny_model, digits, reward_model, run_dir, seed, *overrides):
    """30 steps against the reward model; the validation metrics before and after."""
    result = train_rl(
        rl_config(
            tiny_model,
            digits,
            run_dir,
            reward_model,
            *overrides,
            "trainer.total_steps=30",
            "trainer.val_every=30",
            "trainer.val_at_start=true",
            f"trainer.seed={seed}",
        )
    )
    (_, before), (_, after) = result["validation"]
    return before, after


@pytest.mark.learning
@pytest.mark.parametrize(  # seed 0 in make test, the others in make test-slow
    "seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_ppo_against_the_reward_model_raises_the_rules_satisfaction(
    tiny_model, digits, reward_model, tmp_path, seed
):
    ppo = ("algorithm.name=ppo", "critic.optim.lr=1e-3")
    before, after = validated_run(tiny_model, digits, reward_model, tmp_path, seed, *ppo)
    # val/digits/acc: the true digit share of greedy answers to held-out prompts
    assert after["val/digits/acc"] > before["val/digits/acc"] + 0.5, (before, after)
    assert after["val/digits/model_score"] > before["val/digits/model_score"]
    assert metric(tmp_path, "reward/model/p90")[-1] >= metric(tmp_path, "reward/model/p10")[-1]


@pytest.mark.learning
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_sppo_with_the_reward_model_as_preference_model_raises_the_rules_satisfaction(
    tiny_model, digits, reward_model, tmp_path, seed
):
    """SPPO's win rates from the reward model's Bradley-Terry probabilities,
    sigmoid(r_i - r_j) (temperature 1), within each group."""
    before, after = validated_run(
        tiny_model, digits, reward_model, tmp_path, seed, "algorithm.name=sppo"
    )
    assert after["val/digits/acc"] > before["val/digits/acc"] + 0.5, (before, after)


def test_the_reward_combines_the_function_and_the_model_by_weight(
    tiny_model, digits, reward_model, tmp_path
):
    dumps = tmp_path / "dumps"
    train_rl(
        rl_config(
            tiny_model,
            digits,
            tmp_path / "run",
            reward_model,
            "reward.function_weight=0.5",
            "reward_model.weight=2.0",
            "trainer.total_steps=1",
            f"trainer.dump_rollouts={dumps}",
        )
    )
    batch = Batch.load(dumps / "step_00000001")
    combined = 0.5 * batch["function_scores"] + 2.0 * batch["model_scores"]
    assert torch.allclose(batch["scores"], combined)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForSequenceClassification.from_pretrained(reward_model / "hf").eval()
    lengths = batch["response_mask"].sum(-1).tolist()
    for row in range(0, len(batch), 7):
        prompt = tokenizer.decode(batch["prompts"][row][batch["prompt_mask"][row].bool()])
        response = tokenizer.decode(
            batch["responses"][row][: lengths[row]], skip_special_tokens=True
        )
        assert float(batch["function_scores"][row]) == pytest.approx(digit_share(response))
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
            tokenize=False,
        )
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            expected = float(model(input_ids=ids).logits[0, 0])
        assert float(batch["model_scores"][row]) == pytest.approx(expected, abs=1e-4)
    assert metric(tmp_path / "run", "reward/model/std")


@pytest.mark.slow
@pytest.mark.integration
def test_a_reward_model_on_its_own_devices(tiny_model, digits, reward_model, tmp_path, local_ray):
    """The same rollouts scored by a reward model in its own Ray process give the same
    scores as the colocated one."""
    scores = {}
    for placement, overrides in (
        ("colocated", []),
        ("own", ["reward_model.resources.backend=ray"]),
    ):
        dumps = tmp_path / placement / "dumps"
        train_rl(
            rl_config(
                tiny_model,
                digits,
                tmp_path / placement / "run",
                reward_model,
                "trainer.total_steps=1",
                f"trainer.dump_rollouts={dumps}",
                *overrides,
            )
        )
        scores[placement] = Batch.load(dumps / "step_00000001")["model_scores"]
    processes = json.loads((tmp_path / "own" / "run" / "processes.json").read_text())
    pids = {row["role"]: row["pid"] for row in processes}
    assert pids["reward_model"] != pids["actor"]
    assert torch.allclose(scores["colocated"], scores["own"], atol=1e-5)
