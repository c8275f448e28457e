import copy
import pickle
import subprocess
import sys
import warnings

import pytest
import torch

from ascent.batch import Batch


def big_batch() -> Batch:
    """About 10 MB of tensors of every awkward kind, plus non-tensors and meta."""
    size, length = 64, 8192
    return Batch.from_dict(
        {
            "input_ids": torch.randint(0, 50_000, (size, length)),  # 4 MiB
            "log_probs": torch.randn(size, length),  # 2 MiB
            "hidden": torch.randn(size, length, 2).bfloat16(),  # 2 MiB
            "mask": torch.rand(size, length) > 0.5,
            "transposed": torch.randn(length, size).t(),  # non-contiguous
            "empty": torch.zeros(size, 0),
            "uid": [f"p{i // 4}" for i in range(size)],
            "extra": [{"i": i} for i in range(size)],
        },
        meta={"step": 1},
    )


def tensor_bytes(batch: Batch) -> int:
    return sum(t.numel() * t.element_size() for t in batch.tensors.values())


def dumps_out_of_band(batch: Batch) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers = []
    payload = pickle.dumps(batch, protocol=5, buffer_callback=buffers.append)
    return payload, buffers


def test_tensor_bytes_travel_out_of_band_without_copies(unchanged):
    batch = big_batch()
    assert tensor_bytes(batch) > 10_000_000
    with unchanged(batch):
        payload, buffers = dumps_out_of_band(batch)
    assert len(buffers) == len(batch.tensors.keys())
    assert sum(b.raw().nbytes for b in buffers) == tensor_bytes(batch)
    assert len(payload) < 64 * 1024

    received = pickle.loads(payload, buffers=buffers)
    assert received.equals(batch) and received.keys() == batch.keys()
    # Writable buffers are used in place: the contiguous tensors were never copied.
    assert received["input_ids"].data_ptr() == batch["input_ids"].data_ptr()


def test_read_only_buffers_are_copied_once_into_writable_tensors():
    batch = big_batch()
    payload, buffers = dumps_out_of_band(batch)
    frozen = [memoryview(bytes(b.raw())) for b in buffers]  # like Ray's shared memory
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns when it wraps a non-writable buffer
        received = pickle.loads(payload, buffers=frozen)
    assert received.equals(batch)
    received["log_probs"].add_(1.0)
    assert torch.equal(received["log_probs"], batch["log_probs"] + 1.0)


def test_misaligned_buffers_are_realigned():
    batch = Batch.from_dict({"x": torch.arange(10, dtype=torch.float64)})
    payload, buffers = dumps_out_of_band(batch)
    shifted = bytearray(1) + bytearray(buffers[0].raw())
    received = pickle.loads(payload, buffers=[memoryview(shifted)[1:]])
    assert received["x"].data_ptr() % 8 == 0 and received.equals(batch)


def test_buffers_in_the_wrong_order_are_an_error():
    batch = Batch.from_dict({"a": torch.zeros(2, 3), "b": torch.zeros(2)})
    payload, buffers = dumps_out_of_band(batch)
    with pytest.raises(ValueError, match="buffer for tensor 'a' has 8 bytes, expected 24"):
        pickle.loads(payload, buffers=buffers[::-1])


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_in_band_pickle_round_trips(protocol):
    batch = big_batch()
    payload = pickle.dumps(batch, protocol=protocol)
    assert len(payload) > tensor_bytes(batch)
    received = pickle.loads(payload)
    assert received.equals(batch)
    assert received["input_ids"].data_ptr() != batch["input_ids"].data_ptr()


def test_deepcopy_is_independent_and_parts_send_only_their_rows():
    batch = big_batch()
    clone = copy.deepcopy(batch)
    assert clone.equals(batch)
    clone["log_probs"].zero_()
    assert not torch.equal(batch["log_probs"], clone["log_probs"])

    part = batch.split(4)[1]
    _, buffers = dumps_out_of_band(part)
    assert sum(b.raw().nbytes for b in buffers) == tensor_bytes(part) == tensor_bytes(batch) // 4


def test_gradients_are_not_sent():
    weights = torch.randn(3, 2, requires_grad=True)
    received = pickle.loads(pickle.dumps(Batch.from_dict({"w": weights * 2}), protocol=5))
    assert not received["w"].requires_grad
    assert torch.equal(received["w"], weights.detach() * 2)


RECEIVER = """
import mmap, pickle, sys
path, payload, sizes = pickle.load(sys.stdin.buffer)
with open(path, "rb") as file:
    mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
whole = memoryview(mapped)
views, offset = [], 0
for size in sizes:
    views.append(whole[offset : offset + size])
    offset += size
batch = pickle.loads(payload, buffers=views)
for view in [*views, whole]:
    view.release()
mapped.close()  # BufferError if a tensor still pointed into the mapping
batch["log_probs"].mul_(2.0)
sys.stdout.buffer.write(pickle.dumps(batch, protocol=5))
"""


def test_across_a_process_boundary_through_a_read_only_mapping(tmp_path):
    """The Ray-like path: the payload through a pipe, the buffers in read-only mapped memory
    (what Ray's object store hands to a reader); the receiver gets its own writable copy."""
    batch = big_batch()
    payload, buffers = dumps_out_of_band(batch)
    with open(tmp_path / "buffers.bin", "wb") as file:
        for buffer in buffers:
            file.write(buffer.raw())
    message = pickle.dumps(
        (str(tmp_path / "buffers.bin"), payload, [b.raw().nbytes for b in buffers])
    )
    result = subprocess.run(
        [sys.executable, "-c", RECEIVER], input=message, capture_output=True, check=False
    )
    assert result.returncode == 0, result.stderr.decode()
    received = pickle.loads(result.stdout)
    assert received.equals(batch.assign(log_probs=batch["log_probs"] * 2.0))


@pytest.mark.gpu
def test_cuda_tensors_arrive_on_the_cpu():
    batch = big_batch()
    payload, buffers = dumps_out_of_band(batch.to("cuda"))
    assert sum(b.raw().nbytes for b in buffers) == tensor_bytes(batch)
    received = pickle.loads(payload, buffers=buffers)
    assert received["input_ids"].device.type == "cpu" and received.equals(batch)
