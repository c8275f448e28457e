"""What every split-versus-whole test checks (tensor, sequence, context parallelism): two
worker groups on the same processes, one with the role unsplit, given the same rows in
their dispatch order, must agree on log-probs, losses, gradient norms and weights."""

import pytest
import torch

from ascent.models.tiny_moe import build_tiny_moe
from tests.workers.test_actor import assert_same_weights
from tests.workers.test_two_ranks import arranged

# Small micro-batches, and a log-prob chunk smaller than a rank's share of one.
MICRO = {"tokens_per_micro_batch": 40, "chunk_tokens": 7}


def same_updates(whole, split, batch, steps=2, dp_sizes=(2, 1)):
    """Old log-probs, then ``steps`` updates on each actor group (with ``dp_sizes``
    data-parallel replicas): the same metrics and weights; the split group's last metrics."""
    for step in range(steps):
        old = whole.log_probs(batch)["old_log_probs"]
        torch.testing.assert_close(
            split.log_probs(batch)["old_log_probs"], old, atol=2e-6, rtol=0, msg=f"step {step}"
        )
        batch = batch.assign(old_log_probs=old)
        metrics_whole = whole.update(arranged(batch, dp_sizes[0]))[0]
        metrics_split = split.update(arranged(batch, dp_sizes[1]))[0]
        # Loss terms add up over micro-batches; rates (ppo_kl, clip fractions) are means over
        # micro-batches, which the two layouts may cut differently. A policy loss near 0 is
        # a sum of terms of about 0.1 that cancel: it is compared to float32 rounding of those.
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
            expected = pytest.approx(metrics_whole[key], rel=1e-5, abs=5e-7)
            assert metrics_split[key] == expected, (key, step, metrics_split[key])
        assert_same_weights(whole.full_weights()[0], split.full_weights()[0], atol=1e-6)
    return metrics_split


def same_reference_and_critic(groups, batch):
    """``ref1``/``ref2`` give the same reference log-probs; ``critic1``/``critic2`` the same
    values, and after one update the same loss, gradient norm and weights."""
    torch.testing.assert_close(
        groups["ref2"].log_probs(batch)["ref_log_probs"],
        groups["ref1"].log_probs(batch)["ref_log_probs"],
        atol=2e-6,
        rtol=0,
    )
    values = groups["critic1"].values(batch)["values"]
    torch.testing.assert_close(groups["critic2"].values(batch)["values"], values, atol=2e-6, rtol=0)
    target = torch.where(batch["response_mask"].bool(), 1.0, 0.0)
    batch = batch.assign(values=values, returns=target)
    whole = groups["critic1"].update(arranged(batch, 2))[0]
    split = groups["critic2"].update(arranged(batch, 1))[0]
    for key in ("critic/vf_loss", "critic/grad_norm"):
        assert split[key] == pytest.approx(whole[key], rel=1e-5), key
    assert_same_weights(
        groups["critic1"].full_weights()[0], groups["critic2"].full_weights()[0], atol=1e-6
    )


def tiny_moe_for_tensor_ranks(directory):
    """A tiny Qwen2-MoE (a shared expert beside the routed ones) with two key/value heads,
    one per tensor rank."""
    return str(
        build_tiny_moe(directory, layers=3, dense_layers=(1,), kv_heads=2, family="qwen2_moe")
    )
