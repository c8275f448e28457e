"""``make quickstart``: SFT warm start then GRPO raise held-out accuracy on 2-digit addition by
at least 30 points, and the run leaves its summary, plot, TensorBoard logs and a model that
plain transformers loads. The command line reports bad configs without a traceback."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from ascent.cli import main
from ascent.models import build_tiny_model
from ascent.quickstart import run_quickstart
from ascent.quickstart.task import split_pairs
from ascent.quickstart.warm_start import warm_start


@pytest.mark.learning
@pytest.mark.slow
def test_quickstart_raises_held_out_accuracy(tmp_path):
    """Seed 1 gains +43.4 points on the AMD EPYC the quickstart table (README,
    docs/getting-started.md) comes from (seeds 0-7:
    +43.4 to +60.6, mean +52.8); it is the worst seed there. The assertion is the
    quickstart's promise, +30: 13.4 points below, for other CPU models' floating point
    (at the earlier lr 4e-4 one machine sent this seed to +7.8, another to +42.6)."""
    assert run_quickstart(seed=1, out_dir=str(tmp_path)) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["accuracy_after"] - summary["accuracy_before"] >= 0.30
    assert summary["held_out_problems"] == 500
    steps = [step for step, _ in summary["held_out_accuracy"]]
    assert steps[0] == 0 and steps[-1] == summary["rl"]["steps"]
    assert (tmp_path / "progress.png").stat().st_size > 10_000
    assert list((tmp_path / "rl" / "tensorboard").rglob("events.out.tfevents.*"))
    model = AutoModelForCausalLM.from_pretrained(summary["model"])
    assert sum(p.numel() for p in model.parameters()) > 500_000


def test_a_warm_start_on_a_plateau_starts_again_from_a_new_initialisation(tmp_path, capsys):
    """An unreachable target: every attempt but the last stops at ``plateau_steps`` and the
    next one trains a freshly initialised model; the last runs to ``max_steps``."""
    made = []

    def base_model(attempt: int) -> str:
        made.append(attempt)
        return str(build_tiny_model(tmp_path / f"base_{attempt}", seed=100 + attempt))

    train, dev, _ = split_pairs(0)
    result = warm_start(
        base_model,
        tmp_path / "sft",
        train[:256],
        dev[:20],
        seed=0,
        target=1.01,
        plateau_steps=10,
        attempts=3,
        max_steps=20,
        batch_size=8,
    )
    assert made == [0, 1, 2]
    assert result["attempts"] == 3 and result["steps"] == 20
    assert capsys.readouterr().out.count("starting again from a new initialisation") == 2
    first = AutoModelForCausalLM.from_pretrained(tmp_path / "base_0")
    last = AutoModelForCausalLM.from_pretrained(tmp_path / "base_2")
    assert not all(
        torch.equal(a, b) for a, b in zip(first.parameters(), last.parameters(), strict=True)
    )
    assert (tmp_path / "sft" / "config.json").exists()


def test_cli_rejects_unknown_commands(capsys):
    with pytest.raises(SystemExit):
        main(["fly"])
    assert "invalid choice" in capsys.readouterr().err


def test_cli_reports_config_errors_without_a_traceback(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("model: {path: /m}\ndata: {train_files: [t.jsonl], prompts_per_step: 6}\n")
    assert main(["train", str(config), "actor.prompts_per_update=4"]) == 2
    assert "prompts_per_step=6 must be a multiple of actor.prompts_per_update=4" in (
        capsys.readouterr().err
    )
    assert main(["train", str(config), "algorithm.nme=ppo"]) == 2
    assert "did you mean 'algorithm.name'" in capsys.readouterr().err
