"""A tracking sink that cannot start stops the run before its first step, in seconds, with
one message that names the sink, the reason and the fix (exit 2, no traceback); with
``tracking.best_effort=true`` it is reported, turned off, and the run trains on. Real
packages throughout: nothing listens on port 9, and no W&B or SwanLab key is found because
HOME, the netrc and the config directories point into an empty folder."""

import json
import os
import time

import pytest

from ascent.cli import main
from ascent.trainer.tracking import Tracker, TrackingCannotStart, TrackingConfig
from ascent.trainer.tracking.mlflow_sink import START_REQUESTS, quick_requests
from tests.trainer.rl_setup import overrides_for

DOWN = "http://127.0.0.1:9/"  # the discard port: refused, as by an MLflow server that is down


@pytest.fixture
def no_credentials(tmp_path, monkeypatch):
    """No stored or given API key for wandb or SwanLab, and no user MLflow settings."""
    home = tmp_path / "home"
    home.mkdir()
    for name in ("WANDB_API_KEY", "WANDB_MODE", "SWANLAB_API_KEY", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(name, raising=False)
    for name in START_REQUESTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / "wandb"))
    monkeypatch.setenv("NETRC", str(home / "netrc"))
    monkeypatch.setenv("SWANLAB_ROOT", str(home / "swanlab"))


@pytest.fixture
def train_args(tiny_model, prompts, tmp_path, monkeypatch):
    """``ascent train`` arguments for one RL step of the toy task, plus ``overrides``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.yaml").write_text("{}\n")

    def args(*overrides: str) -> list[str]:
        run = overrides_for(tiny_model, prompts, tmp_path / "run", "trainer.total_steps=1")
        return ["train", "config.yaml", *run, *overrides]

    return args


def test_an_mlflow_server_that_is_down_stops_ascent_train_before_any_worker(
    train_args, tmp_path, capsys, no_credentials
):
    began = time.perf_counter()
    code = main(train_args("tracking.sinks=[console,jsonl,mlflow]", f"tracking.mlflow_uri={DOWN}"))
    seconds = time.perf_counter() - began
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("ascent train: tracking: the mlflow sink could not start (")
    assert "Connection refused" in err and "tracking.mlflow_uri" in err, err
    assert "remove mlflow from tracking.sinks" in err and "tracking.best_effort=true" in err
    assert "Traceback" not in err
    run = tmp_path / "run"
    assert not (run / "processes.json").exists()  # no worker was spawned
    assert not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text()
    assert seconds < 30, f"{seconds:.1f} s: MLflow's HTTP retries are back"  # was 4.3 min
    assert not any(name in os.environ for name in START_REQUESTS)  # MLflow's own again


def test_best_effort_reports_the_sink_turns_it_off_and_trains(
    train_args, tmp_path, capsys, no_credentials
):
    overrides = ("tracking.sinks=[jsonl,mlflow]", f"tracking.mlflow_uri={DOWN}")
    assert main(train_args(*overrides, "tracking.best_effort=true")) == 0
    err = capsys.readouterr().err
    assert err.count("the mlflow sink could not start") == 1 and "training goes on" in err
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]


def test_wandb_online_without_an_api_key_stops_ascent_sft_before_any_worker(
    tiny_model, tmp_path, capsys, no_credentials
):
    """wandb would ask for a key at a terminal, or wait out its init timeout; it is told
    neither, so the message comes at once (pytest's stdin is no terminal either way)."""
    rows = [{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}]
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows * 4))
    (tmp_path / "empty.yaml").write_text("{}\n")
    run = tmp_path / "run"
    code = main(
        [
            "sft",
            str(tmp_path / "empty.yaml"),
            f"model.path={tiny_model}",
            f"data.train_files=[{data}]",
            f"trainer.run_dir={run}",
            "trainer.batch_size=4",
            "tracking.sinks=[console,jsonl,tensorboard,wandb]",
            "tracking.mode=online",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("ascent sft: tracking: the wandb sink could not start (")
    assert "No API key configured" in err and "`wandb login`" in err, err
    assert "tracking.mode=offline" in err and "Traceback" not in err
    # Neither steps nor TensorBoard events: trainer.resume=off takes the corrected run here.
    assert not (run / "metrics.jsonl").exists() and not (run / "tensorboard").exists()


def test_a_sink_that_cannot_start_closes_those_already_open(tmp_path, no_credentials):
    """MLflow (its SQLite store) opens before SwanLab fails online without a key: its run
    is finished, not left RUNNING."""
    import mlflow

    settings = TrackingConfig(sinks=["jsonl", "mlflow", "swanlab"], mode="online")
    with pytest.raises(TrackingCannotStart, match="the swanlab sink could not start") as stop:
        Tracker(tmp_path, settings)
    assert "`swanlab login`" in str(stop.value)
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ascent").experiment_id])
    assert run.info.status == "FINISHED"
    assert not (tmp_path / "metrics.jsonl").exists()


def test_a_users_mlflow_request_settings_are_theirs_at_start_too(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "300")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    with quick_requests():
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "1"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "300"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ


def test_a_start_that_fails_after_tracking_opened_closes_its_run(
    train_args, tmp_path, capsys, no_credentials
):
    """A role that cannot start (a reward model path with no model, found in its worker)
    after the tracker opened: the command fails as a user error and the MLflow run is
    finished, not left RUNNING in the user's tracking server."""
    import mlflow

    missing = f"reward_model.model.path={tmp_path / 'no_rm'}"
    assert main(train_args("tracking.sinks=[jsonl,mlflow]", missing)) == 2
    assert "reward_model (rank 0): no model at" in capsys.readouterr().err
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'run' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ascent").experiment_id])
    assert run.info.status != "RUNNING"
