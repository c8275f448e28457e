"""Sampled validation (``trainer.val_samples_per_prompt``): n answers per validation prompt,
the @k metrics of ``ascent.algos.pass_at_k`` per data source and overall, through the run and
from a scored batch; the settings checked at start."""

import string

import pytest
import torch

from ascent.algos.pass_at_k import at_k_metrics
from ascent.batch import Batch
from ascent.config import ConfigError
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.validation import answer_keys, at_k
from tests.trainer.rl_setup import config, metric
from tests.trainer.test_rl_config import plan_for

MEAN_PASS = ("mean@1", "pass@1", "pass@3")


def test_a_run_logs_consistent_at_k_metrics(tiny_model, prompts, tmp_path, capsys):
    """Four sampled answers to each of the 16 validation prompts, before and after a step."""
    run_dir = tmp_path / "run"
    run = config(
        tiny_model,
        prompts,
        run_dir,
        "data.prompts_per_step=4",
        "rollout.samples_per_prompt=2",
        "reward.function=tests.trainer.scorers:first_digit",
        "trainer.total_steps=1",
        "trainer.val_every=1",
        "trainer.val_at_start=true",
        "trainer.val_samples_per_prompt=4",
        "trainer.val_greedy=true",
    )
    assert train_rl(run)["steps"] == 1
    assert "validation: 4 answers per prompt at temperature 1" in capsys.readouterr().out
    for prefix in ("val/digits/", "val/"):
        names = [f"{name}@{k}" for name in ("mean", "pass", "maj") for k in (1, 2, 4)]
        values = {name: metric(run_dir, prefix + name) for name in names}
        assert all(len(v) == 2 for v in values.values()), values  # at the start and step 1
        for at in range(2):
            for name, series in values.items():
                assert 0 <= series[at] <= 1, name
            assert values["pass@1"][at] == pytest.approx(values["mean@1"][at], abs=1e-9)
            assert values["maj@1"][at] == pytest.approx(values["mean@1"][at], abs=1e-9)
            assert values["mean@4"][at] == pytest.approx(values["mean@1"][at], abs=1e-9)
            passes = [values[f"pass@{k}"][at] for k in (1, 2, 4)]
            assert passes == sorted(passes), passes
    # One source: its prompts are all prompts; acc is the mean over all 64 answers.
    assert metric(run_dir, "val/pass@4") == metric(run_dir, "val/digits/pass@4")
    acc = metric(run_dir, "val/digits/acc")
    assert acc == pytest.approx(metric(run_dir, "val/digits/mean@1"), abs=1e-6)
    assert len(metric(run_dir, "val/digits/greedy/acc")) == 2


def test_agent_episodes_are_the_answers(tiny_model, prompts, tmp_path):
    """With ``rollout.agent``, each of a prompt's n episodes is one answer (its last row)."""
    run_dir = tmp_path / "run"
    run = config(
        tiny_model,
        prompts,
        run_dir,
        "data.chat_template=true",
        "data.prompts_per_step=4",
        "rollout.samples_per_prompt=2",
        "rollout.max_response_length=32",
        f"rollout.stop=[{', '.join(string.ascii_lowercase)}]",  # turns end by themselves
        "rollout.agent.environment=tests.agents.envs:Again",
        "rollout.agent.max_turns=3",
        "reward.function=tests.trainer.scorers:first_digit",
        "trainer.total_steps=1",
        "trainer.val_every=1",
        "trainer.val_samples_per_prompt=3",
    )
    train_rl(run)
    [mean], [pass1], [pass3] = (metric(run_dir, f"val/digits/{m}") for m in MEAN_PASS)
    assert pass1 == pytest.approx(mean, abs=1e-9) and pass1 <= pass3 <= 1
    assert metric(run_dir, "val/digits/acc") == pytest.approx([mean], abs=1e-6)
    assert len(metric(run_dir, "val/agent/turns/mean")) == 1


def scored_rows() -> Batch:
    """Two prompts of source a and one of b, three answers each (uids interleaved, as
    episode rows may be); the second prompt's scorer gave no answers: its responses vote."""
    responses = torch.tensor([[5, 6, 0], [5, 7, 0], [5, 6, 0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1]])
    return Batch.from_dict(
        {
            "uid": ["p0", "p1", "p2", "p0", "p1", "p2", "p0", "p1", "p2"],
            "data_source": ["a", "a", "b"] * 3,
            "acc": torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]),
            "answers": ["4", None, "x", "5", None, "x", "4", None, "y"],
            "responses": responses.repeat(3, 1),
            "response_mask": mask.repeat(3, 1),
        }
    )


def test_at_k_groups_answers_by_prompt_and_averages_per_source():
    scored = scored_rows()
    # p1's responses: [5, 7], [5, 7], [5, 7] with masks ending 0, 0 -> one class (same tokens)
    keys = answer_keys(scored)
    assert keys[0] == ("answer", "4") and keys[1] == ("response", 5, 7)
    assert keys[2] == ("answer", "x")
    metrics = at_k(scored, (1, 3))
    acc = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    classes = torch.tensor([[0, 1, 0], [0, 0, 0], [0, 0, 1]])
    expected = at_k_metrics(acc, classes, [1, 3])
    for name, values in expected.items():
        assert metrics[f"val/a/{name}"] == pytest.approx(float(values[:2].mean()))
        assert metrics[f"val/b/{name}"] == pytest.approx(float(values[2]))
        assert metrics[f"val/{name}"] == pytest.approx(float(values.mean()))
    assert metrics["val/a/maj@3"] == pytest.approx((1.0 + 1 / 3) / 2)  # "4" wins; p1's mean


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["trainer.val_samples_per_prompt=4", "trainer.val_temperature=0"], "one answer"),
        (["trainer.val_samples_per_prompt=4", "trainer.val_k=[1,8]"], r"val_k=\[1, 8\]"),
        (["trainer.val_greedy=true"], "greedy already"),
    ],
)
def test_settings_that_cannot_work_are_refused_at_start(overrides, message):
    with pytest.raises(ConfigError, match=message):
        plan_for(*overrides)


def test_defaults_keep_one_greedy_answer_and_derive_the_ks():
    _, plan = plan_for()
    assert (plan.validation.n, plan.validation.temperature) == (1, 0.0)
    _, plan = plan_for("trainer.val_samples_per_prompt=6", "rollout.temperature=0.7")
    assert (plan.validation.temperature, plan.validation.ks) == (0.7, (1, 2, 4, 6))
