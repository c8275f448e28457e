import contextlib
import copy

import pytest
import torch

from ascent.batch import Batch


def sample_batch(size: int = 6, length: int = 5, seed: int = 0) -> Batch:
    """A batch with every kind of field: int, bool, bf16 and float tensors of several ranks,
    str/int/None/dict non-tensors, and meta."""
    gen = torch.Generator().manual_seed(seed)
    return Batch.from_dict(
        {
            "input_ids": torch.randint(0, 100, (size, length), generator=gen),
            "attention_mask": torch.rand(size, length, generator=gen) > 0.3,
            "scores": torch.randn(size, generator=gen),
            "hidden": torch.randn(size, length, 3, generator=gen).bfloat16(),
            "uid": [f"p{i // 2}" for i in range(size)],
            "data_source": ["gsm8k"] * size,
            "extra": [{"index": i, "tags": ["a", i], "none": None} for i in range(size)],
        },
        meta={"step": 3, "weight_version": 2},
    )


@pytest.fixture
def batch() -> Batch:
    return sample_batch()


@pytest.fixture
def unchanged():
    """``with unchanged(batch): op(batch)`` fails if the op changed the batch in any way."""

    @contextlib.contextmanager
    def check(batch: Batch):
        tensors = {k: v.clone() for k, v in batch.tensors.items()}
        non_tensors = copy.deepcopy(batch.non_tensors)
        meta = copy.deepcopy(batch.meta)
        yield
        assert list(batch.tensors.keys()) == list(tensors)
        for key, before in tensors.items():
            after = batch.tensors[key]
            assert after.dtype == before.dtype and torch.equal(after, before), key
        assert batch.non_tensors == non_tensors
        assert batch.meta == meta

    return check


@pytest.fixture
def make_batch():
    return sample_batch
