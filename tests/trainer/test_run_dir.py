"""A run directory holds one run: ``trainer.resume=off`` refuses a used one (and the old run
stays whole), a restart without a usable checkpoint says so and drops the earlier attempt's
records, and another run's checkpoint is not resumed into a used directory."""

import json
import shutil

import pytest

from ascent.cli import main
from ascent.config import dump_config
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.run_dir import RunDirInUse
from tests.trainer.rl_setup import config, metric
from tests.trainer.test_resume import corrupt


def snapshot(run_dir):
    """Every file of the run and its bytes."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


def test_resume_off_refuses_a_directory_that_holds_a_run(tiny_model, prompts, tmp_path, capsys):
    run_dir = tmp_path / "run"
    train_rl(config(tiny_model, prompts, run_dir, "trainer.total_steps=2", "trainer.save_every=1"))
    before = snapshot(run_dir)
    fresh = config(tiny_model, prompts, run_dir, "trainer.total_steps=1", "trainer.resume=off")
    with pytest.raises(RunDirInUse, match=r"holds an earlier run \(2 checkpoint\(s\) up to step_"):
        train_rl(fresh)
    assert snapshot(run_dir) == before  # not a byte of the old run changed

    config_file = tmp_path / "fresh.yaml"
    dump_config(fresh, config_file)
    capsys.readouterr()
    assert main(["train", str(config_file)]) == 2
    err = capsys.readouterr().err
    assert "trainer.resume=auto" in err and "another trainer.run_dir" in err
    assert "metrics.jsonl (2 records)" in err
    assert snapshot(run_dir) == before


@pytest.mark.parametrize("lost", ["never saved", "every checkpoint corrupt"])
def test_a_restart_without_a_checkpoint_says_so_and_drops_the_old_records(
    tiny_model, prompts, tmp_path, capsys, lost
):
    run = ["trainer.resume=auto", "trainer.log_generations=2"]
    first = ["trainer.total_steps=2", *run]
    if lost == "never saved":  # killed before its first checkpoint: records, no checkpoint
        train_rl(config(tiny_model, prompts, tmp_path, *first))
        shutil.rmtree(tmp_path / "checkpoints")
    else:
        train_rl(config(tiny_model, prompts, tmp_path, *first, "trainer.keep_last=1"))
        corrupt(tmp_path / "checkpoints" / "step_00000002")
    capsys.readouterr()
    result = train_rl(config(tiny_model, prompts, tmp_path, "trainer.total_steps=3", *run))
    err = capsys.readouterr().err
    assert "restarts from step 0" in err
    why = "stopped before its first checkpoint" if lost == "never saved" else "is intact"
    assert why in err
    assert result["steps"] == 3
    assert metric(tmp_path, "step") == [1, 2, 3]  # each step once, from this attempt
    lines = (tmp_path / "generations.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 1, 2, 2, 3, 3]


def test_another_runs_checkpoint_is_not_resumed_into_a_used_directory(
    tiny_model, prompts, tmp_path
):
    train_rl(config(tiny_model, prompts, tmp_path / "a", "trainer.total_steps=1"))
    train_rl(config(tiny_model, prompts, tmp_path / "b", "trainer.total_steps=1"))
    other = tmp_path / "a" / "checkpoints" / "step_00000001"
    with pytest.raises(RunDirInUse, match="checkpoint of another run"):
        train_rl(
            config(
                tiny_model,
                prompts,
                tmp_path / "b",
                "trainer.total_steps=2",
                f"trainer.resume={other}",
            )
        )
    result = train_rl(  # into an empty directory it is a fine start
        config(
            tiny_model, prompts, tmp_path / "c", "trainer.total_steps=2", f"trainer.resume={other}"
        )
    )
    assert result["steps"] == 2 and metric(tmp_path / "c", "step") == [2]
