"""A run that has stopped learning says so: with a constant reward every group's samples
score the same, and after ``trainer.collapse_steps`` such steps a warning names the likely
causes (``stop_on_collapse`` ends the run there, with a checkpoint, and ``ascent train``
exits 3); an agent run whose tool calls keep failing is reported the same way."""

import pytest
import torch

from ascent.cli import main
from ascent.trainer.rl.collapse import groups_with_spread
from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config, metric, overrides_for

CONSTANT = "reward.function=tests.trainer.scorers:always_wrong"


def test_groups_with_spread_counts_groups_whose_scores_differ():
    scores = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.5, 0.5])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    assert groups_with_spread(scores, groups) == pytest.approx(1 / 3)
    singletons = torch.arange(3)
    assert groups_with_spread(torch.tensor([1.0, 1.0, 1.0]), singletons) == 0.0
    assert groups_with_spread(torch.tensor([1.0, 0.0, 1.0]), singletons) == 1.0
    assert groups_with_spread(torch.tensor([]), torch.tensor([], dtype=torch.long)) == 0.0


def test_a_constant_reward_is_reported_after_collapse_steps(tiny_model, prompts, tmp_path, capfd):
    run_dir = tmp_path / "run"
    steps = ["trainer.total_steps=5", "trainer.collapse_steps=2", CONSTANT]
    result = train_rl(config(tiny_model, prompts, run_dir, *steps))
    assert result["steps"] == 5 and result["collapsed"] is None, "warn only, by default"
    assert metric(run_dir, "signal/groups_with_spread") == [0.0] * 5
    assert metric(run_dir, "signal/steps_without_spread") == [1.0, 2.0, 3.0, 4.0, 5.0]
    warnings = [line for line in capfd.readouterr().err.splitlines() if "warning:" in line]
    assert len(warnings) == 2, warnings  # at 2 and 4 steps in a row
    assert warnings[0].startswith("warning: step 2: for 2 steps in a row no prompt's samples")
    assert all(cause in warnings[0] for cause in ("warm start", "the reward", "the format"))


def test_a_learning_run_is_not_reported(tiny_model, prompts, tmp_path, capfd):
    run_dir = tmp_path / "run"
    train_rl(
        config(tiny_model, prompts, run_dir, "trainer.total_steps=3", "trainer.collapse_steps=1")
    )
    assert all(share > 0 for share in metric(run_dir, "signal/groups_with_spread"))
    assert "warning:" not in capfd.readouterr().err


def test_stop_on_collapse_ends_the_run_with_a_checkpoint_and_exit_3(
    tiny_model, prompts, tmp_path, capsys
):
    run_dir = tmp_path / "run"
    (tmp_path / "empty.yaml").write_text("{}\n")
    overrides = overrides_for(
        tiny_model,
        prompts,
        run_dir,
        "trainer.total_steps=10",
        "trainer.collapse_steps=3",
        "trainer.stop_on_collapse=true",
        CONSTANT,
    )
    assert main(["train", str(tmp_path / "empty.yaml"), *overrides]) == 3
    assert metric(run_dir, "step") == [1, 2, 3]
    assert (run_dir / "checkpoints" / "step_00000003").is_dir()
    assert "stopped on a collapse, checkpoint saved: step 3: for 3 steps" in capsys.readouterr().err


def test_failing_tool_calls_are_reported(tiny_model, prompts, tmp_path, capfd):
    run_dir = tmp_path / "run"
    train_rl(
        config(
            tiny_model,
            prompts,
            run_dir,
            "trainer.total_steps=2",
            "trainer.collapse_steps=2",
            "data.chat_template=true",
            "data.prompts_per_step=4",
            "rollout.samples_per_prompt=2",
            "rollout.max_response_length=24",
            "rollout.stop=[a, e, i]",
            "rollout.agent.tools=[tests.agents.test_agent_loop:multiply]",
            "rollout.agent.tool_parser=tests.agents.envs:every_turn_a_bad_call",
            "rollout.agent.max_turns=2",
        )
    )
    assert metric(run_dir, "agent/tool_error_rate") == [1.0, 1.0]
    assert metric(run_dir, "agent/steps_with_tool_errors") == [1.0, 2.0]
    err = capfd.readouterr().err
    assert "warning: step 2: for 2 steps in a row more than 50% of the tool calls failed" in err
