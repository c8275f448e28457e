"""``ascent report RUN_DIR``: the page and its plots for RL (sync, async, agent), supervised and
partial runs; what was not recorded is named; bad run directories are user errors that say
what to do. The page in a real browser: ``test_report_browser.py``."""

import json
import re
import subprocess
import sys

import pytest

from ascent.cli import main
from ascent.errors import InputError, InputNotFound
from ascent.report import write_report
from ascent.report.panels import PANELS
from tests.report.run_dirs import full_run, log_steps, rl_config, write_generations


def images(page):
    return re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,[A-Za-z0-9+/=]+">', page)


def test_every_panel_is_drawn_and_embedded(tmp_path):
    run_dir = full_run(tmp_path / "run")
    page_path = write_report(run_dir)
    assert page_path == run_dir / "report" / "index.html"
    page = page_path.read_text()
    drawn = {panel.slug for panel in PANELS} - {"validation_other"}  # no val/loss in an RL run
    assert {p.stem for p in page_path.parent.glob("*.png")} == drawn
    assert len(images(page)) == len(drawn)
    assert "Not recorded" not in page
    assert "Staleness (async)" in page and "Agent tool use" in page
    # Self-contained: nothing fetched from anywhere, and no script of its own.
    assert not re.search(r'(src|href)="(?!data:)', page) and "<script" not in page
    assert "say &lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in page
    assert "Sample generations (steps 1, 4, 6 of 6 logged)" in page
    assert "mode: <code>async</code>" in page and "tests.x:multiply" in page  # the config


def test_what_was_not_recorded_is_named(tmp_path):
    """A sync GRPO run without validation that logged the score and timings only, one step
    with a NaN entropy."""
    run_dir = tmp_path / "run"
    rl_config(run_dir, "trainer.val_every=0", "trainer.log_generations=0")
    log_steps(
        run_dir,
        lambda step: {
            "critic/score/mean": step / 10,
            "actor/entropy": float("nan") if step == 2 else 1.0,
            "timing_s/step": 1.0,
        },
    )
    page = write_report(run_dir, tmp_path / "out").read_text()
    notes = re.findall(r"<li>(.*?)</li>", page)
    missing = [note.split(":")[1].strip() for note in notes if note.startswith("Not recorded")]
    assert missing == [
        "Training accuracy",
        "KL divergence",
        "Response length",
        "Clip fractions",
        "Training loss",
        "Gradient norm",
    ]
    assert "Not recorded: KL divergence: none of actor/kl_loss, actor/reward_kl_penalty" in page
    assert "actor/entropy was NaN or infinite at step(s) 2" in notes
    assert "No generations.jsonl: RL runs write it when trainer.log_generations &gt; 0" in notes
    assert {p.stem for p in (tmp_path / "out").glob("*.png")} == {"reward", "entropy", "timings"}


def test_an_async_run_without_staleness_is_told(tmp_path):
    run_dir = tmp_path / "run"
    rl_config(run_dir, "trainer.mode=one_step_off")
    log_steps(run_dir, lambda step: {"critic/score/mean": 0.5})
    page = write_report(run_dir).read_text()
    assert "Not recorded: Staleness (async): none of async/staleness_mean" in page


def test_sampled_validation_without_its_metrics_is_told(tmp_path):
    """trainer.val_samples_per_prompt > 1 should log the @k metrics beside acc."""
    run_dir = tmp_path / "run"
    rl_config(run_dir, "data.val_files=[/data/val.jsonl]", "trainer.val_samples_per_prompt=4")
    log_steps(run_dir, lambda step: {"critic/score/mean": 0.5}, validation={"val/d/acc": 0.3})
    page = write_report(run_dir).read_text()
    assert "Not recorded: Validation at k samples: none of val/&lt;source&gt;/pass@k" in page
    assert "Not recorded: Validation:" not in page


def test_a_distillation_run_without_its_metrics_is_told(tmp_path):
    run_dir = tmp_path / "run"
    rl_config(run_dir, "teacher.model.path=/models/teacher")
    log_steps(run_dir, lambda step: {"critic/score/mean": 0.5})
    page = write_report(run_dir).read_text()
    assert "Not recorded: Distillation: none of distill/reverse_kl" in page


def test_a_supervised_run(tmp_path):
    """SFT: loss, gradient norm, held-out loss and timings; no RL panel is missed."""
    run_dir = tmp_path / "sft"
    log_steps(
        run_dir,
        lambda step: {"sft/loss": 2 / step, "sft/grad_norm": 1.0, "timing_s/step": 0.1},
        validation={"val/loss": 2.0},
    )
    page = write_report(run_dir).read_text()
    assert set(images(page)) == {
        "Training loss",
        "Gradient norm",
        "Stage timings",
        "Validation loss and other",
    }
    assert "Not recorded" not in page and "supervised (ascent sft / rm)" in page
    assert "No config.yaml" in page and "generations.jsonl" not in page


def test_a_second_report_drops_plots_the_run_no_longer_has(tmp_path):
    run_dir = full_run(tmp_path / "run")
    write_report(run_dir)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "timing_s/step": 1.0}) + "\n")
    write_report(run_dir)
    assert [p.name for p in (run_dir / "report").glob("*.png")] == ["timings.png"]


def test_the_command_prints_the_page(tmp_path, capsys):
    run_dir = full_run(tmp_path / "run")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "out" / "index.html")


def test_the_command_says_what_is_wrong(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("ascent report: ") and "does not exist" in error


def test_a_directory_without_metrics_names_the_runs_inside_it(tmp_path):
    """``ascent quickstart --out DIR`` keeps its RL run in DIR/rl."""
    log_steps(tmp_path / "qs" / "rl", lambda step: {"critic/score/mean": 0.5})
    with pytest.raises(InputNotFound, match=r"these run directories inside it do: .*qs/rl"):
        write_report(tmp_path / "qs")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputNotFound, match="not a run directory, or its run logged no metrics"):
        write_report(tmp_path / "empty")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"step": 1, "a": 1.0}', '{"step": 2, "a":', '{"step": 3}'], r"line 2 of .* not JSON"),
        (['{"step": 1, "a": 1.0}', "[1, 2]"], r"line 2 of .* is not a JSON object"),
        (['{"a": 1.0}'], r"line 1 of .* has no integer 'step'"),
        ([], r"holds no metrics yet"),
    ],
)
def test_unreadable_metrics_name_the_line(tmp_path, lines, message):
    (tmp_path / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    with pytest.raises(InputError, match=message):
        write_report(tmp_path)


def test_a_file_is_not_a_run_directory(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    with pytest.raises(InputError, match="is a file; ascent report takes a run directory"):
        write_report(tmp_path / "metrics.jsonl")


def test_a_corrupt_generations_line_is_named(tmp_path):
    log_steps(tmp_path, lambda step: {"critic/score/mean": 0.5})
    write_generations(tmp_path)
    with open(tmp_path / "generations.jsonl", "a") as out:
        out.write('{"step": 7, "prompt": "cut\n')
    with pytest.raises(InputError, match=r"line 25 of .*generations.jsonl is not JSON"):
        write_report(tmp_path)


def test_a_real_rl_run(tiny_model, prompts, tmp_path):
    """Two PPO steps of the trainer's toy task (a critic, KL in the reward, validation): the
    report draws what the trainer logged and misses nothing a run like it records."""
    from ascent.trainer.rl.loop import train_rl
    from tests.trainer.rl_setup import config

    overrides = ["trainer.total_steps=2", "trainer.val_every=1", "algorithm.name=ppo"]
    train_rl(config(tiny_model, prompts, tmp_path, *overrides))
    page = write_report(tmp_path).read_text()
    assert "Not recorded" not in page
    drawn = set(images(page))
    assert {"Reward", "Validation", "KL divergence", "Policy entropy", "Clip fractions"} <= drawn
    assert "Sample generations (steps 1, 2 of 2 logged)" in page
    assert "algorithm: <code>ppo</code>" in page


def test_the_report_imports_neither_torch_nor_the_trainer(tmp_path):
    """It reads files only, so it runs on any copy of a run directory, quickly: the package,
    and the ``ascent report`` command (the CLI builds ``serve``'s torch-backed flags only for
    ``serve``)."""
    heavy = "[m for m in sys.modules if m == 'torch' or m.startswith('ascent.trainer')]"
    code = f"import sys, ascent.report; print({heavy})"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[]"
    run = full_run(tmp_path / "run")
    command = (
        f"import sys; from ascent.cli import main; main(['report', {str(run)!r}]); print({heavy})"
    )
    found = subprocess.run([sys.executable, "-c", command], capture_output=True, text=True)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip().splitlines()[-1] == "[]"
