"""The tinker-cookbook's own minimal loops (``recipes.sl_loop``, ``recipes.rl_loop``),
unchanged but for their base URL, against a real ``ascent service`` process: the supervised
loop lowers its loss and saves its checkpoints (state and sampler weights), and resumed
from its step-3 state it repeats steps 3-5 exactly; the RL loop samples groups, scores them
and trains on them (``loss_fn=importance_sampling``). They run from the cookbook's own environment
(``make cookbook-venv``), offline: the model name is one the cookbook knows
(``meta-llama/Llama-3.2-1B``, its role_colon renderer), and a directory of that name in the
working directory holds the tiny model, whose tokenizer the loops load from it; the
datasets they hard-code (``HuggingFaceH4/no_robots``, ``openai/gsm8k``) are local
directories of those names too."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from ascent.models.tiny import build_tiny_model
from tests.servers import ascent_service

pytestmark = [pytest.mark.integration, pytest.mark.slow]
VENV = Path(os.environ.get("COOKBOOK_VENV", Path.home() / ".cache/ascent/cookbook-venv"))
PYTHON = VENV / "bin" / "python"
MODEL_NAME = "meta-llama/Llama-3.2-1B"
GSM8K_CARD = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train.jsonl
---
"""


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    if not PYTHON.is_file():
        pytest.fail(f"no cookbook environment at {VENV}: run `make cookbook-venv`")
    root = tmp_path_factory.mktemp("cookbook")
    build_tiny_model(root / MODEL_NAME, seed=0)
    chats = [
        {
            "messages": [
                {"role": "user", "content": f"say {i}"},
                {"role": "assistant", "content": f"{i} {i}"},
            ]
        }
        for i in range(32)
    ]
    write_jsonl(root / "HuggingFaceH4/no_robots/train.jsonl", chats)
    problems = [
        {"question": f"What is {i}+2?", "answer": f"It is {i + 2}.\n#### {i + 2}"} for i in range(8)
    ]
    write_jsonl(root / "openai/gsm8k/main/train.jsonl", problems)
    (root / "openai" / "gsm8k" / "README.md").write_text(GSM8K_CARD)  # a dataset card
    return root


@pytest.fixture(scope="module")
def service(workdir):
    flags = ("--name", MODEL_NAME, "--root", str(workdir / "checkpoints"))
    with ascent_service(workdir / MODEL_NAME, workdir / "service.log", *flags) as process:
        yield process


def run_loop(workdir: Path, service, recipe: str, *settings: str) -> subprocess.CompletedProcess:
    env = os.environ | {
        "TINKER_API_KEY": "tml-local",
        "TINKER_TELEMETRY": "0",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(workdir / "hf"),
        "OMP_NUM_THREADS": "1",
    }
    command = [str(PYTHON), "-m", f"tinker_cookbook.recipes.{recipe}", f"base_url={service.url}"]
    command += [f"model_name={MODEL_NAME}", "lora_rank=8", *settings]
    done = subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_supervised_loop_trains_saves_and_resumes(workdir, service):
    log = workdir / "sl"
    settings = ("batch_size=4", "learning_rate=1e-2", "save_every=3", f"log_path={log}")
    run_loop(workdir, service, "sl_loop", *settings, "max_steps=6")
    nll = [
        row["train_mean_nll"] for row in records(log / "metrics.jsonl") if "train_mean_nll" in row
    ]
    assert len(nll) == 6 and nll[-1] < 0.92 * nll[0], nll
    saved = records(log / "checkpoints.jsonl")
    assert saved[-1]["name"] == "final" and saved[-1]["sampler_path"].startswith("tinker://")
    assert any(row.get("state_path", "").endswith("/weights/000003") for row in saved)
    # As if the run had died after its step-3 checkpoint: it resumes from there, exactly.
    third = [row for row in saved if row.get("state_path", "").endswith("/weights/000003")]
    (log / "checkpoints.jsonl").write_text(json.dumps(third[0]) + "\n")
    resumed = run_loop(workdir, service, "sl_loop", *settings, "max_steps=6")
    assert "Resuming from batch 3" in resumed.stdout + resumed.stderr
    rows = [row for row in records(log / "metrics.jsonl") if "train_mean_nll" in row]
    again = {row["step"]: row["train_mean_nll"] for row in rows[6:]}
    assert sorted(again) == [3, 4, 5]
    for step in (3, 4, 5):
        assert again[step] == pytest.approx(nll[step], rel=1e-4), step


def test_the_rl_loop_samples_scores_and_trains(workdir, service):
    log = workdir / "rl"
    run_loop(
        workdir,
        service,
        "rl_loop",
        "loss_fn=importance_sampling",
        "batch_size=2",
        "group_size=4",
        "max_tokens=16",
        "max_steps=2",
        "save_every=0",
        f"log_path={log}",
    )
    steps = records(log / "metrics.jsonl")
    assert [row["progress/batch"] for row in steps] == [0, 1]
    assert records(log / "checkpoints.jsonl")[-1]["name"] == "final"
