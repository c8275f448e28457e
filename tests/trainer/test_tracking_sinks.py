"""Each tracking sink read back through its own tool: TensorBoard's event reader, MLflow's
client, wandb's offline run file (its own protobuf records) and SwanLab's offline store
(its own reader). Config, metrics per step, the resolved config as parameters, sample
generations as a table; a sink failing later (or at start, with tracking.best_effort) is
reported once and turned off while the others and the run go on; mlflow and wandb reopen their
runs on resume. A sink that cannot start stopping the run: test_tracking_start.py."""

import json
import sys
from pathlib import Path

import pytest

from ascent.trainer.rl.loop import train_rl
from ascent.trainer.tracking import Tracker, TrackingConfig
from tests.trainer.rl_setup import config as rl_config

RUN_CONFIG = {"model": {"path": "/models/tiny"}, "actor": {"optim": {"lr": 0.001}}}
SAMPLES = [
    {"prompt": "1+2=", "response": "3", "score": 1.0},
    {"prompt": "2+2=", "response": "5 | oops", "score": 0.0},
]


def run_tracker(run_dir, sinks, steps=3, **settings):
    """A tracker over ``steps`` steps (loss = 1 / (step + 1)) and samples at the last."""
    tracker = Tracker(run_dir, TrackingConfig(sinks=sinks, mode="offline", **settings), RUN_CONFIG)
    for step in range(steps):
        tracker.log({"actor/loss": 1.0 / (step + 1), "perf/throughput": 10.0 * step}, step)
    tracker.log_samples(SAMPLES, steps - 1)
    ids = tracker.run_ids()
    tracker.close()
    return ids


def test_tensorboard_events_hold_scalars_config_and_samples(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_tracker(tmp_path, ["tensorboard"])
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("actor/loss")] == [
        (0, 1.0),
        (1, 0.5),
        (2, pytest.approx(1 / 3)),
    ]
    texts = {tag: events.Tensors(tag) for tag in events.Tags()["tensors"]}
    config = texts["config/text_summary"][0].tensor_proto.string_val[0].decode()
    assert '"lr": 0.001' in config
    samples = texts["generations/text_summary"][0]
    assert samples.step == 2 and "5 \\| oops" in samples.tensor_proto.string_val[0].decode()


def test_mlflow_run_holds_params_metrics_and_the_samples_table(tmp_path):
    import mlflow

    ids = run_tracker(tmp_path, ["mlflow"])
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    run = client.get_run(ids["mlflow"])
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name
    assert run.data.params["actor.optim.lr"] == "0.001"
    history = client.get_metric_history(ids["mlflow"], "actor/loss")
    assert [(m.step, m.value) for m in history] == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    table = Path(client.download_artifacts(ids["mlflow"], "generations/step_000002.json"))
    saved = json.loads(table.read_text())
    assert saved["columns"] == ["prompt", "response", "score"]
    assert saved["data"][1] == ["2+2=", "5 | oops", 0.0]


def wandb_records(path: Path) -> list:
    """The protobuf records of a wandb run file: a LevelDB-style log of 32 KiB blocks, each
    record a 7-byte header (crc32, length, kind: full, first, middle, last) and its bytes."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, position, pending = [], 7, b""
    while position + 7 <= len(data):
        room = 32768 - position % 32768
        if room < 7:  # the rest of a block too small for a header: padding
            position += room
            continue
        length = int.from_bytes(data[position + 4 : position + 6], "little")
        kind, payload = data[position + 6], data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # full, last
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending + payload)
            records.append(record)
            pending = b""
        elif kind in (2, 3):  # first, middle
            pending += payload
    return records


def test_wandb_offline_run_holds_config_history_and_the_samples_table(tmp_path):
    ids = run_tracker(tmp_path, ["wandb"])
    (run_file,) = (tmp_path / "wandb").glob(f"offline-run-*-{ids['wandb']}/run-*.wandb")
    records = wandb_records(run_file)
    kinds = [record.WhichOneof("record_type") for record in records]
    assert kinds[1] == "run" and kinds[-1] == "exit", (run_file.stat().st_size, kinds)
    (run,) = [record.run for record in records if record.WhichOneof("record_type") == "run"]
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["actor"] == {"optim": {"lr": 0.001}} and run.display_name == tmp_path.name
    history = [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}
        for items in (r.history.item for r in records if r.WhichOneof("record_type") == "history")
    ]
    losses = [(h["_step"], h["actor/loss"]) for h in history if "actor/loss" in h]
    assert losses == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    (table,) = run_file.parent.glob("files/media/table/generations_2_*.table.json")
    saved = json.loads(table.read_text())
    assert saved["columns"] == ["prompt", "response", "score"]
    assert saved["data"][1] == ["2+2=", "5 | oops", 0.0]


def test_swanlab_offline_run_holds_config_scalars_and_the_samples(tmp_path):
    from swanlab.proto.swanlab.record.v1 import record_pb2
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    run_tracker(tmp_path, ["swanlab"])
    (run_file,) = (tmp_path / "swanlog").glob("run-*/run-*.swanlab")
    reader = DataStoreReader()
    reader.open(run_file)
    records = []
    for data in reader:
        record = record_pb2.Record()
        record.ParseFromString(data)
        records.append(record)
    scalars = [
        (r.scalar.step, r.scalar.value.number)
        for r in records
        if r.WhichOneof("record_type") == "scalar" and r.scalar.key == "actor/loss"
    ]
    assert scalars == [(0, 1.0), (1, 0.5), (2, pytest.approx(1 / 3))]
    media = [r.media for r in records if r.WhichOneof("record_type") == "media"]
    assert [(m.key, m.step) for m in media] == [("generations", 2)]
    text = next(run_file.parent.glob("media/text/*.txt")).read_text()
    assert "5 \\| oops" in text
    assert "lr: 0.001" in (run_file.parent / "files" / "config.yaml").read_text()


def test_a_failing_sink_is_reported_once_and_turned_off(tmp_path, capsys, monkeypatch):
    """With best_effort, wandb online without credentials cannot start and is turned off;
    in either mode, an mlflow run deleted under the tracker fails its next write; JSONL and
    the run go on."""
    import mlflow

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    settings = TrackingConfig(sinks=["jsonl", "wandb", "mlflow"], mode="online", best_effort=True)
    tracker = Tracker(tmp_path, settings, RUN_CONFIG)
    assert [sink.name for sink in tracker.sinks] == ["mlflow"]
    tracker.log({"loss": 1.0}, 0)
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client.delete_run(tracker.run_ids()["mlflow"])
    for step in (1, 2):
        tracker.log({"loss": 1.0 / (step + 1)}, step)
    tracker.close()
    errors = capsys.readouterr().err
    assert errors.count("the wandb sink could not start") == 1
    assert errors.count("the mlflow sink failed in log") == 1
    assert "training goes on" in errors and tracker.sinks == []
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2]


def test_a_resumed_run_goes_on_in_the_same_mlflow_and_wandb_runs(tmp_path):
    import mlflow

    ids = run_tracker(tmp_path, ["mlflow", "wandb"], steps=2)
    tracker = Tracker(
        tmp_path,
        TrackingConfig(sinks=["mlflow", "wandb"], mode="offline"),
        RUN_CONFIG,
        resume_step=1,
        run_ids=ids,
    )
    tracker.log({"actor/loss": 0.25}, 2)
    assert tracker.run_ids() == ids
    tracker.close()
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = client.get_metric_history(ids["mlflow"], "actor/loss")
    assert [m.step for m in history] == [0, 1, 2]


def test_a_selected_sink_that_is_not_installed_stops_the_run_at_start(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "swanlab", None)  # import swanlab now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'ascent\[tracking\]'"):
        Tracker(tmp_path, TrackingConfig(sinks=["jsonl", "swanlab"]))


def test_an_rl_run_writes_every_sink_the_same_metrics(tiny_model, prompts, tmp_path):
    """Two GRPO steps with every sink (wandb and swanlab offline): each tool holds the
    JSONL's score per step, the run's config, and the step's sample generations."""
    import mlflow
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    sinks = "tracking.sinks=[jsonl,tensorboard,wandb,mlflow,swanlab]"
    overrides = (
        sinks,
        "tracking.mode=offline",
        "trainer.total_steps=2",
        "trainer.log_generations=2",
    )
    train_rl(rl_config(tiny_model, prompts, run_dir, *overrides))
    key = "critic/score/mean"
    expected = [
        (record["step"], record[key])
        for record in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if key in record
    ]
    assert [step for step, _ in expected] == [1, 2]

    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert [(e.step, pytest.approx(e.value)) for e in events.Scalars(key)] == expected

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ascent").experiment_id])
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)] == expected
    assert run.data.params["rollout.samples_per_prompt"] == "8"
    names = {a.path for a in client.list_artifacts(run.info.run_id, "generations")}
    assert names == {"generations/step_000001.json", "generations/step_000002.json"}

    (wandb_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    history = [
        {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}
        for items in (
            r.history.item
            for r in wandb_records(wandb_file)
            if r.WhichOneof("record_type") == "history"
        )
    ]
    assert [(h["_step"], pytest.approx(h[key])) for h in history if key in h] == expected
    assert len(list(wandb_file.parent.glob("files/media/table/generations_*.table.json"))) == 2

    (swanlab_dir,) = (run_dir / "swanlog").glob("run-*")
    assert "samples_per_prompt: 8" in (swanlab_dir / "files" / "config.yaml").read_text()
    assert len(list(swanlab_dir.glob("media/text/*.txt"))) == 2
