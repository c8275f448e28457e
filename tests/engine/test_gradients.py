"""The engine's gradient clipping (one all-reduce over any mix of meshes) equals torch's
``clip_grad_norm_`` to the bit on one rank, so runs that do not split experts or sequences
keep their numerics."""

import math

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from ascent.engine.gradients import clip_sharded_gradients


@pytest.fixture(autouse=True)
def one_process_group():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def sharded_gradients(scale):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 3))
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    model(torch.randn(4, 8)).pow(2).sum().mul(scale).backward()
    return list(model.parameters())


@pytest.mark.parametrize("scale", [1e-3, 100.0])  # below and above the clip
def test_equals_torch_clip_grad_norm(scale):
    ours, theirs = sharded_gradients(scale), sharded_gradients(scale)
    norm = clip_sharded_gradients(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert norm == float(expected.full_tensor())
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a.grad.full_tensor(), b.grad.full_tensor())


def test_a_non_finite_gradient_is_reported():
    params = sharded_gradients(1.0)
    params[0].grad.to_local()[0, 0] = float("nan")  # the DTensor's own local piece
    assert math.isnan(clip_sharded_gradients(params, 1.0))
