"""Weights as a safetensors directory: a round trip keeps every tensor, a rewrite replaces the
file whole, and refresh files go to /dev/shm only when it has room for them."""

import os
import shutil

import pytest
import torch

from ascent.rollout.weight_files import memory_directory, read_weights, write_weights


def test_written_weights_read_back_equal_and_a_rewrite_replaces_them(tmp_path):
    first = {"a.weight": torch.randn(3, 4), "b.bias": torch.arange(5, dtype=torch.bfloat16)}
    write_weights(tmp_path, first.items())
    assert {name: t for name, t in read_weights(tmp_path)}.keys() == first.keys()
    for name, tensor in read_weights(tmp_path):
        assert torch.equal(tensor, first[name]) and tensor.dtype == first[name].dtype
    write_weights(tmp_path, [("a.weight", torch.zeros(2))])
    assert [name for name, _ in read_weights(tmp_path)] == ["a.weight"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]  # no partial


def test_reading_a_directory_without_weights_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        list(read_weights(tmp_path))


@pytest.mark.skipif(not os.access("/dev/shm", os.W_OK), reason="no writable /dev/shm")
def test_refresh_files_go_to_memory_only_when_it_has_room(tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    write_weights(small, [("w", torch.zeros(10))])
    assert memory_directory(small) == "/dev/shm"
    large = tmp_path / "large"
    large.mkdir()
    with open(large / "model.safetensors", "wb") as sparse:  # its size, not its blocks
        sparse.truncate(shutil.disk_usage("/dev/shm").free // 4 + 1)
    assert memory_directory(large) is None
