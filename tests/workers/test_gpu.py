"""The engine on CUDA: bf16 compute with fp32 reduction, CPU offload, checkpointing.
Run with `pytest -m gpu` on a GPU machine (no Ray needed: in-process backend)."""

import pytest
import torch

from ascent.workers import ActorConfig, ActorWorker
from tests.workers.data import rl_batch
from tests.workers.test_actor import reference_log_probs

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("cpu_offload", [False, True])
def test_bf16_update_on_cuda(tiny_model, cpu_offload):
    from ascent.controller import ResourcePool, spawn_group

    cfg = ActorConfig.model_validate(
        {
            "model": {"path": tiny_model, "gradient_checkpointing": True},
            "optim": {"lr": 1e-3},
            "fsdp": {"cpu_offload": cpu_offload},
            "mini_batches": 2,
        }
    )
    batch = rl_batch(rows=8, seed=13)
    pool = ResourcePool(device="cuda")
    with spawn_group(ActorWorker, pool, args=(cfg,), backend="in-process") as actor:
        old = actor.log_probs(batch)["old_log_probs"]
        before = actor.full_weights()[0]
        metrics = actor.update(batch.assign(old_log_probs=old))[0]
        after = actor.full_weights()[0]
    expected = reference_log_probs(tiny_model, batch, 1.0)
    valid = batch["attention_mask"][:, -5:].bool()
    torch.testing.assert_close(old[valid].double(), expected[valid], atol=5e-2, rtol=0)  # bf16
    assert metrics["actor/skipped_steps"] == 0 and metrics["actor/grad_norm"] > 0
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(t.dtype == torch.float32 for t in after.values()), "fp32 master weights"
