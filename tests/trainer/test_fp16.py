"""float16 RL on the toy task: the run trains through loss-scale overflows (skipped, counted,
not faults), trainer and generator agree more closely in float16 than in bfloat16 (the point
of it: arXiv 2510.26788), a resumed float16 run scales and logs exactly as the whole one,
and (``gpu``) a float16 update on CUDA."""

import math

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.trainer.rl.loop import train_rl
from ascent.trainer.rl.roles import generation_dtype_of
from tests.trainer.rl_setup import config, metric
from tests.trainer.test_resume import EXACT, records

# rollout.dtype stays auto: it follows the actor's param_dtype.
FP16 = ["actor.fsdp.param_dtype=float16"]


def test_the_rollout_dtype_follows_the_actor_unless_set(tiny_model, prompts, tmp_path):
    assert generation_dtype_of(config(tiny_model, prompts, tmp_path, *FP16)) == "float16"
    assert generation_dtype_of(config(tiny_model, prompts, tmp_path)) == "auto"
    chosen = config(tiny_model, prompts, tmp_path, *FP16, "rollout.dtype=bfloat16")
    assert generation_dtype_of(chosen) == "bfloat16"


def test_a_float16_run_trains_through_overflows(tiny_model, prompts, tmp_path):
    """The scale starts far too high (2^24) and grows after every clean step: some steps
    overflow and are skipped, the others train."""
    train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path,
            *FP16,
            "trainer.total_steps=4",
            "actor.prompts_per_update=4",  # 2 optimiser steps per RL step
            "actor.fsdp.loss_scale.init_scale=16777216",
            "actor.fsdp.loss_scale.growth_interval=1",
            "trainer.export=true",
        )
    )
    assert all(math.isfinite(loss) for loss in metric(tmp_path, "actor/pg_loss"))
    assert metric(tmp_path, "actor/skipped_steps") == [0.0] * 4, "overflows are not faults"
    overflows = sum(metric(tmp_path, "actor/loss_scale_skipped"))
    assert 1 <= overflows < 8, f"{overflows} of 8 optimiser steps overflowed"
    assert min(metric(tmp_path, "actor/loss_scale")) < 2.0**24  # backed off
    trained = load_causal_lm(str(tmp_path / "hf")).state_dict()
    initial = load_causal_lm(tiny_model).state_dict()
    assert any(not torch.equal(trained[name], initial[name]) for name in initial)


def mean_mismatch(tiny_model, prompts, run_dir, dtype: str) -> float:
    run = [f"actor.fsdp.param_dtype={dtype}", f"rollout.dtype={dtype}", "trainer.total_steps=3"]
    train_rl(config(tiny_model, prompts, run_dir, *run))
    values = metric(run_dir, "rollout/mismatch_kl")
    assert len(values) == 3
    return sum(values) / len(values)


def test_float16_trainer_and_generator_agree_more_closely_than_bfloat16(
    tiny_model, prompts, tmp_path
):
    """The same run and seed, both sides in each dtype: float16's 10 mantissa bits against
    bfloat16's 7 make the per-token log-prob differences ~8x smaller and the k3 mismatch KL
    (quadratic in them) ~64x (measured on this task: ~5e-10 against ~2e-7)."""
    fp16 = mean_mismatch(tiny_model, prompts, tmp_path / "fp16", "float16")
    bf16 = mean_mismatch(tiny_model, prompts, tmp_path / "bf16", "bfloat16")
    assert 0 < fp16 < bf16 / 10, (fp16, bf16)


def test_a_resumed_float16_run_equals_the_whole_run(tiny_model, prompts, tmp_path):
    """The scale grows after every clean step, so a resume that restarted it at init_scale
    would log other actor/loss_scale values (and, past an overflow, other updates)."""
    run = [*EXACT, *FP16, "actor.fsdp.loss_scale.growth_interval=1"]
    whole, halves = tmp_path / "whole", tmp_path / "halves"
    train_rl(config(tiny_model, prompts, whole, "trainer.total_steps=4", *run))
    train_rl(config(tiny_model, prompts, halves, "trainer.total_steps=2", *run))
    train_rl(config(tiny_model, prompts, halves, "trainer.total_steps=4", *run))
    assert records(halves) == records(whole)
    scales = metric(whole, "actor/loss_scale")
    assert scales[-1] > scales[0], "the scale grew during the run"


@pytest.mark.gpu
@pytest.mark.parametrize("cpu_offload", [False, True])
def test_a_float16_update_on_cuda(tiny_model, cpu_offload):
    """float16 compute over float32 weights on CUDA (with the gradients on the CPU too)."""
    from ascent.controller import ResourcePool, spawn_group
    from ascent.workers import ActorWorker
    from tests.workers.data import rl_batch
    from tests.workers.test_actor import config as actor_config

    fsdp = {"param_dtype": "float16", "cpu_offload": cpu_offload}
    cfg = actor_config(tiny_model, optim={"lr": 1e-3}, fsdp=fsdp)
    pool = ResourcePool(device="cuda")
    with spawn_group(ActorWorker, pool, args=(cfg,), backend="in-process") as actor:
        before = actor.full_weights()[0]
        metrics = actor.update(rl_batch(rows=8, seed=13))[0]
        after = actor.full_weights()[0]
    assert metrics["actor/skipped_steps"] == 0 and metrics["actor/loss_scale_skipped"] < 2
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(t.dtype == torch.float32 for t in after.values()), "fp32 master weights"
