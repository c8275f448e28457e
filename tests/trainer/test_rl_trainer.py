"""The RL trainer end to end on a toy task (make the response digits, scored by
``tests.rewards.scorers:digit_share``): GRPO and PPO with a critic learn, two ranks over Ray
with a KL loss to a reference learn, a rollout on its own device follows the actor, every
preset runs with the roles its plan names, dumped rollouts replay to the same update, and a
misbehaving scorer does not stop a run. Resume and faults: ``test_resume``,
``test_interruptions``."""

import json
import math

import pytest
from transformers import AutoTokenizer

from ascent.config import load_config
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.plan import make_plan
from ascent.trainer.rl.presets import PRESETS
from tests.rewards.scorers import digit_share
from tests.trainer.rl_setup import config, metric


def assert_learned(run_dir):
    scores = metric(run_dir, "critic/score/mean")
    first, last = sum(scores[:5]) / 5, sum(scores[-5:]) / 5
    assert last > first + 0.4, f"score went from {first:.2f} to {last:.2f}: {scores}"


@pytest.mark.learning
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_the_score_rises(tiny_model, prompts, tmp_path, algorithm):
    overrides = ["trainer.total_steps=30", f"algorithm.name={algorithm}"]
    if algorithm == "ppo":
        overrides += ["critic.optim.lr=1e-3"]
    run = config(tiny_model, prompts, tmp_path, *overrides)
    train_rl(run)
    assert_learned(tmp_path)
    if algorithm == "ppo":
        assert metric(tmp_path, "critic/vf_loss")  # the critic trained
    else:
        assert metric(tmp_path, "actor/kl_loss")  # grpo's KL loss to the reference
    assert load_config(RLConfig, tmp_path / "config.yaml") == run  # the resolved config
    lines = (tmp_path / "generations.jsonl").read_text().splitlines()
    assert len(lines) == 30 * 4  # trainer.log_generations per step
    last = json.loads(lines[-1])
    assert last["step"] == 30 and last["prompt"].startswith("say ")
    eos = AutoTokenizer.from_pretrained(tiny_model).eos_token
    response = last["response"].replace(eos, "")  # logged with special tokens, scored without
    assert last["score"] == pytest.approx(digit_share(None, response, None, None))


@pytest.mark.learning
@pytest.mark.integration
@pytest.mark.slow
def test_a_rollout_on_its_own_device_follows_the_actor(tiny_model, prompts, tmp_path, local_ray):
    """Separate placement: weights travel to the rollout's process after every update (the
    score could not rise otherwise)."""
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path,
            "trainer.total_steps=30",
            "algorithm.kl.mode=none",
            "resources.backend=ray",
            "rollout.resources.backend=ray",
        )
    )
    assert_learned(tmp_path)


@pytest.mark.learning
@pytest.mark.integration
@pytest.mark.slow  # make test: two ranks update as one (test_rank_invariance), one rank learns
def test_two_ranks_over_ray_learn(tiny_model, prompts, tmp_path, local_ray):
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path,
            "trainer.total_steps=30",
            "resources.devices_per_node=2",
            "algorithm.kl.mode=loss",
        )
    )
    assert_learned(tmp_path)
    assert metric(tmp_path, "actor/kl_loss")[-1] > 0  # the policy moved from the reference


def test_dumped_rollouts_replay_to_the_same_update(tiny_model, prompts, tmp_path):
    dumps = tmp_path / "dumps"
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path / "live",
            "trainer.total_steps=2",
            f"trainer.dump_rollouts={dumps}",
        )
    )
    assert sorted(p.name for p in dumps.iterdir()) == ["step_00000001", "step_00000002"]
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path / "replay",
            "trainer.total_steps=2",
            f"trainer.replay_rollouts={dumps}",
        )
    )
    for key in ["actor/pg_loss", "actor/grad_norm", "actor/entropy", "critic/advantages/max"]:
        live, replay = metric(tmp_path / "live", key), metric(tmp_path / "replay", key)
        assert replay == pytest.approx(live, rel=1e-5, abs=1e-7), key
    with pytest.raises(FileNotFoundError, match="no saved batch for step 3"):
        train_rl(
            config(
                tiny_model,
                prompts,
                tmp_path / "too-far",
                "trainer.total_steps=3",
                f"trainer.replay_rollouts={dumps}",
            )
        )


# ReMax's run checks all that GRPO's does, and its greedy baselines too.
@pytest.mark.parametrize("algorithm", [pytest.param("grpo", marks=pytest.mark.slow), "remax"])
def test_a_misbehaving_scorer_does_not_stop_the_run(tiny_model, tmp_path, capsys, algorithm):
    """Failures are counted per step, and ReMax's greedy baselines (one per prompt) apart."""
    truths = ["raise", "nan", "hang", "ok"] * 4
    rows = [
        {"data_source": "toy", "prompt": f"say {i}", "reward_model": {"ground_truth": truth}}
        for i, truth in enumerate(truths)
    ]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    run = config(
        tiny_model,
        tmp_path,
        tmp_path / "run",
        f"data.val_files=[{tmp_path / 'train.jsonl'}]",
        "data.prompts_per_step=4",
        "data.shuffle=false",
        "rollout.samples_per_prompt=2",
        "reward.function=tests.rewards.scorers:flaky",
        "reward.workers=2",
        "reward.timeout_s=1",
        "trainer.total_steps=2",
        "trainer.val_every=2",
        f"algorithm.name={algorithm}",
    )
    assert train_rl(run)["steps"] == 2
    for key in ["reward/errors", "reward/non_finite", "reward/timeouts"]:
        assert metric(tmp_path / "run", key) == [2.0, 2.0], key
        assert metric(tmp_path / "run", f"val/{key}") == [4.0], key  # 16 answers, 4 of each
        baselines = [1.0, 1.0] if algorithm == "remax" else []  # 4 greedy answers a step
        assert metric(tmp_path / "run", f"baseline/{key}") == baselines, key
    assert "scorer bug" in capsys.readouterr().out  # the first failure, with its sample


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_algorithm_runs_with_its_own_roles(tiny_model, prompts, tmp_path, name):
    """Two off-policy steps (two mini-batches each) of every preset: the roles and stages the
    plan names are the ones that ran."""
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        f"algorithm.name={name}",
        "data.prompts_per_step=4",
        "rollout.samples_per_prompt=4",
        "actor.prompts_per_update=2",
        "trainer.total_steps=2",
    )
    plan = make_plan(run)
    train_rl(run)
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["step"] == 2 and 0 <= record["critic/score/mean"] <= 1
    assert ("critic/vf_loss" in record) == plan.critic
    assert ("prm/loss" in record) == plan.implicit_prm == (name == "prime")
    assert ("timing_s/ref" in record) == plan.reference
    assert ("dynamic_sampling/groups" in record) == plan.dynamic_sampling
    assert "timing_s/old_log_prob" in record  # two mini-batches: the second is off-policy
    assert math.isfinite(record["actor/pg_loss"]) and record["actor/grad_norm"] > 0


def test_the_transformers_reference_engine_follows_the_actor(tiny_model, prompts, tmp_path):
    """``rollout.engine=transformers`` takes every update (it could not load weights before:
    the first refresh raised), and its samples carry the version the trainer assigned."""
    run = config(
        tiny_model,
        prompts,
        tmp_path,
        "rollout.engine=transformers",
        "data.prompts_per_step=4",
        "rollout.samples_per_prompt=4",
        "trainer.total_steps=2",
    )
    train_rl(run)
    assert metric(tmp_path, "rollout/weight_version") == [1.0, 2.0]
