"""What a newcomer hit before the first step: a config that asks a local Ray for more than the
machine has fails at once with the fields named (it waited minutes), a step larger than the
dataset is refused, the SFT example's model and data can be made, and the suite's conftest
does not need Ray. After it: a scorer that fails on every sample ends the run with a message,
not a traceback."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ascent.cli import main
from tests.trainer.rl_setup import overrides_for

REPO = Path(__file__).resolve().parents[2]


def test_an_example_asking_a_local_ray_for_more_cpus_fails_at_once(tiny_model, capsys):
    """examples/train_grpo_gsm8k.yaml asks for 8 workers; with a core each beyond this
    machine's, no local Ray is started and the message is ``ascent doctor``'s."""
    import ray

    cpus = len(os.sched_getaffinity(0))
    began = time.perf_counter()
    code = main(
        [
            "train",
            str(REPO / "examples" / "train_grpo_gsm8k.yaml"),
            f"model.path={tiny_model}",
            f"resources.cpus_per_worker={cpus}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert time.perf_counter() - began < 30
    assert not ray.is_initialized()
    assert (
        "resources.nodes x resources.devices_per_node x resources.cpus_per_worker need "
        f"{8 * cpus} CPU and 0 GPU, this machine has {cpus} and 0" in err
    )
    assert "resources.ray_address" in err


def test_several_nodes_without_a_cluster_fail_at_once(tiny_model, prompts, tmp_path, capsys):
    overrides = overrides_for(tiny_model, prompts, tmp_path / "run", "resources.nodes=2")
    code = main(["train", str(_empty_yaml(tmp_path)), *overrides])
    assert code == 2
    assert "resources.nodes=2 but no Ray cluster is given" in capsys.readouterr().err


def test_more_prompts_per_step_than_the_data_has_is_refused(tiny_model, prompts, tmp_path, capsys):
    run_dir = tmp_path / "run"
    overrides = overrides_for(tiny_model, prompts, run_dir, "data.prompts_per_step=512")
    assert main(["train", str(_empty_yaml(tmp_path)), *overrides]) == 2
    err = capsys.readouterr().err
    assert "data.prompts_per_step=512 is more than the 256 usable prompts" in err
    assert not run_dir.exists()  # refused before anything was written


def test_an_sft_batch_larger_than_the_data_is_refused(tiny_model, tmp_path, capsys):
    rows = [{"prompt": "a", "response": "b"}] * 10
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    run_dir = tmp_path / "run"
    overrides = [
        f"model.path={tiny_model}",
        f"data.train_files=[{data}]",
        "trainer.batch_size=16",
        f"trainer.run_dir={run_dir}",
    ]
    assert main(["sft", str(_empty_yaml(tmp_path)), *overrides]) == 2
    assert "trainer.batch_size=16 is more than the 10 usable examples" in capsys.readouterr().err
    assert not run_dir.exists()


def test_the_sft_example_runs_on_what_its_script_makes(tmp_path, monkeypatch, capsys):
    made = subprocess.run(
        [sys.executable, str(REPO / "examples" / "make_copy_data.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    monkeypatch.chdir(tmp_path)  # the example's paths are relative, as a user runs it
    code = main(
        [
            "sft",
            str(REPO / "examples" / "sft_copy.yaml"),
            "trainer.max_steps=20",
            "trainer.val_every=10",
            "trainer.export=false",
            "trainer.save_every=0",
            "trainer.progress_bar=false",
            "tracking.sinks=[jsonl]",
        ]
    )
    assert code == 0
    losses = [
        record["val/loss"]
        for record in map(json.loads, (tmp_path / "runs/sft-copy/metrics.jsonl").open())
        if "val/loss" in record
    ]
    assert len(losses) >= 2 and losses[-1] < 0.7 * losses[0], losses


def test_the_suite_does_not_import_ray_unless_a_test_asks():
    """The GPU machine has no Ray: collecting the suite there must not need it."""
    code = "import sys, tests.conftest; assert 'ray' not in sys.modules, 'conftest imports ray'"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _empty_yaml(tmp_path: Path) -> Path:
    path = tmp_path / "empty.yaml"
    path.write_text("{}\n")
    return path


def test_a_scorer_that_fails_on_every_sample_ends_the_run_with_a_message(
    tiny_model, prompts, tmp_path, capsys
):
    """Not a traceback: the CLI names the failure (exit 1), as for a dead worker."""
    overrides = overrides_for(
        tiny_model,
        prompts,
        tmp_path / "run",
        "trainer.total_steps=1",
        "reward.function=tests.trainer.scorers:always_raises",
    )
    assert main(["train", str(_empty_yaml(tmp_path)), *overrides]) == 1
    err = capsys.readouterr().err
    assert "ascent train: reward: the scorer failed on all 64 samples" in err
    assert "this scorer is broken" in err
