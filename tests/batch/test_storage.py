import json
import math
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import safetensors.torch
import torch
from tensordict import TensorDict

from ascent.batch import Batch


def test_round_trip_keeps_dtypes_extras_and_order(tmp_path, make_batch, unchanged):
    batch = make_batch().assign(
        flags=torch.tensor([True, False] * 3),
        counts=torch.arange(6, dtype=torch.int32),
        ground_truth=["42", "π ≈ 3.14", "", None, "x", "y"],
        extra2=[{"nested": {"list": [1, 2.5, None, True]}, "nan": math.inf}] * 6,
    )
    with unchanged(batch):
        assert batch.save(tmp_path / "b") == tmp_path / "b"
    loaded = Batch.load(tmp_path / "b")
    assert loaded.equals(batch)
    assert loaded.keys() == batch.keys()
    assert loaded["hidden"].dtype == torch.bfloat16 and loaded["flags"].dtype == torch.bool
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == [
        "batch.json",
        "tensors.safetensors",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_files_are_plain_safetensors_and_json(tmp_path, make_batch):
    batch = make_batch()
    batch.save(tmp_path / "b")
    header = json.loads((tmp_path / "b" / "batch.json").read_text())
    assert header["format"] == "ascent.batch" and header["version"] == 1
    assert header["batch_size"] == 6 and header["meta"] == batch.meta
    assert header["non_tensors"]["uid"] == batch["uid"]
    tensors = safetensors.torch.load_file(tmp_path / "b" / "tensors.safetensors")
    assert torch.equal(tensors["input_ids"], batch["input_ids"])


def test_tuples_come_back_as_lists(tmp_path):
    Batch.from_dict({"pair": [(1, 2)]}, meta={"shape": (3, 4)}).save(tmp_path / "b")
    loaded = Batch.load(tmp_path / "b")
    assert loaded["pair"] == [[1, 2]] and loaded.meta == {"shape": [3, 4]}


@pytest.mark.parametrize(
    "batch",
    [
        Batch.from_dict({"ids": torch.zeros(0, 7, dtype=torch.bfloat16), "uid": []}),
        Batch.from_dict({"uid": ["a", "b"]}),
        Batch(TensorDict({}, batch_size=[5]), meta={"step": 0}),
    ],
    ids=["zero-rows", "no-tensors", "no-fields"],
)
def test_edge_batches_round_trip(tmp_path, batch):
    batch.save(tmp_path / "b")
    loaded = Batch.load(tmp_path / "b")
    assert len(loaded) == len(batch) and loaded.equals(batch)


def test_views_and_shared_storage_save(tmp_path, make_batch):
    part = make_batch(8).split(4)[2]  # views into the whole batch's tensors
    part.save(tmp_path / "part")
    size = (tmp_path / "part" / "tensors.safetensors").stat().st_size
    assert Batch.load(tmp_path / "part").equals(part)

    base = torch.arange(12.0).view(2, 6)
    shared = Batch.from_dict({"a": base[:, :3], "b": base[:, 3:], "c": base})
    shared.save(tmp_path / "shared")
    assert Batch.load(tmp_path / "shared").equals(shared)
    assert size < 2_000  # only the part's rows, not the whole batch's storage


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        ("extra", np.int64(3), r"non_tensors\['extra'\]\[2\] is a int64"),
        ("extra", {"tags": {1, 2}}, r"non_tensors\['extra'\]\[2\]\['tags'\] is a set"),
        ("extra", {1: "a"}, r"non_tensors\['extra'\]\[2\] has the dict key 1"),
        ("extra", torch.tensor(1.0), r"non_tensors\['extra'\]\[2\] is a Tensor"),
    ],
)
def test_non_json_value_names_field_and_row_and_writes_nothing(
    tmp_path, make_batch, field, value, pattern
):
    batch = make_batch()
    rows = list(batch[field])
    rows[2] = value
    with pytest.raises(TypeError, match=pattern):
        batch.assign(**{field: rows}).save(tmp_path / "b")
    assert list(tmp_path.iterdir()) == []


def test_overwrite(tmp_path, make_batch):
    first, second = make_batch(seed=0), make_batch(seed=1)
    first.save(tmp_path / "b")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        second.save(tmp_path / "b")
    second.save(tmp_path / "b", overwrite=True)
    assert Batch.load(tmp_path / "b").equals(second)
    assert [p.name for p in tmp_path.iterdir()] == ["b"]


def test_failed_overwrite_keeps_the_previous_save(tmp_path, make_batch):
    good = make_batch()
    good.save(tmp_path / "b")
    bad = good.assign(extra=[object()] * 6)
    with pytest.raises(TypeError, match=r"non_tensors\['extra'\]\[0\] is a object"):
        bad.save(tmp_path / "b", overwrite=True)
    assert Batch.load(tmp_path / "b").equals(good)
    assert [p.name for p in tmp_path.iterdir()] == ["b"]


CRASHING_SAVER = """
import sys, torch
from ascent.batch import Batch
path = sys.argv[1]
batches = [Batch.from_dict({"x": torch.full((64, 16384), float(i)), "i": [i] * 64}) for i in (0, 1)]
batches[0].save(path)
print("saved", flush=True)
i = 0
while True:
    i += 1
    batches[i % 2].save(path, overwrite=True)
"""


def test_killed_save_never_leaves_a_partial_batch(tmp_path):
    """SIGKILL a process that overwrites a 4 MB batch in a loop: whatever the moment, the
    path holds a complete batch, or (killed between the two renames) the previous one
    survives in the hidden .old sibling."""
    path = tmp_path / "b"
    child = subprocess.Popen(
        [sys.executable, "-c", CRASHING_SAVER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "saved"
    time.sleep(0.3)
    child.send_signal(signal.SIGKILL)
    child.wait()

    def is_complete(directory):
        loaded = Batch.load(directory)
        value = loaded["i"][0]
        return loaded["i"] == [value] * 64 and bool((loaded["x"] == value).all())

    if path.exists():
        assert is_complete(path)
    else:
        with pytest.raises(FileNotFoundError, match="no saved batch"):
            Batch.load(path)
        assert any(is_complete(p) for p in tmp_path.glob(".b.old-*"))


def test_missing_files_are_named(tmp_path, make_batch):
    with pytest.raises(FileNotFoundError, match=r"no saved batch at .*nothing"):
        Batch.load(tmp_path / "nothing")
    make_batch().save(tmp_path / "b")
    (tmp_path / "b" / "tensors.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"tensors\.safetensors is missing"):
        Batch.load(tmp_path / "b")
    (tmp_path / "b" / "batch.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"batch\.json is missing"):
        Batch.load(tmp_path / "b")


def corrupt_json(directory):
    (directory / "batch.json").write_text('{"format": "ascent.batch", "vers')


def truncate_tensors(directory):
    path = directory / "tensors.safetensors"
    path.write_bytes(path.read_bytes()[:-10])


def edit_header(**changes):
    def edit(directory):
        path = directory / "batch.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    return edit


@pytest.mark.parametrize(
    ("damage", "pattern"),
    [
        (corrupt_json, r"batch\.json is corrupt \(not valid JSON"),
        (truncate_tensors, r"tensors\.safetensors is corrupt"),
        (edit_header(version=99), r"batch\.json has format version 99"),
        (edit_header(format="other"), r"batch\.json is not an ascent batch file"),
        (edit_header(meta=None), r"batch\.json is corrupt: 'meta' is missing or not a dict"),
        (edit_header(tensor_keys=["input_ids"]), r"tensors\.safetensors holds tensors"),
    ],
)
def test_corrupt_files_are_named(tmp_path, make_batch, damage, pattern):
    make_batch().save(tmp_path / "b")
    damage(tmp_path / "b")
    with pytest.raises(ValueError, match=pattern):
        Batch.load(tmp_path / "b")
