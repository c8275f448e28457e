"""The float16 loss scaler (``ascent.engine.loss_scale``): an overflow skips the step and
halves the scale, clean steps in a row double it, a non-finite loss is a fault and not an
overflow, the unscaled float16 gradients are float32's where unscaled ones underflow, the
engine steps it and checkpoints it, and two FSDP2 ranks skip together when only one
overflows."""

import json
import math

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pydantic import ValidationError
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from ascent.engine import FSDPConfig, OptimConfig, PolicyModule, TrainEngine
from ascent.engine.config import LossScaleSettings
from ascent.engine.loss_scale import LossScaler, Verdict
from ascent.engine.state import load_engine, save_engine
from ascent.models import load_causal_lm
from ascent.workers import ActorWorker
from ascent.workers.common import policy_forward
from tests.workers.conftest import in_process
from tests.workers.data import rl_batch
from tests.workers.test_actor import config

CPU = torch.device("cpu")
INF = float("inf")
ADAM = OptimConfig(lr=1e-3)


@pytest.fixture(autouse=True)
def one_process_group():
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def with_grad(*values: float) -> torch.Tensor:
    param = torch.zeros(len(values), requires_grad=True)
    param.grad = torch.tensor(values)
    return param


def test_an_overflow_skips_and_halves_the_scale():
    scaler = LossScaler(16.0, growth_interval=3, device=CPU)
    assert scaler.scale_loss(torch.tensor(0.5)).item() == 8.0
    param = with_grad(1.0, INF)
    assert scaler.check([param]) is Verdict.OVERFLOW
    scaler.update(Verdict.OVERFLOW)
    assert scaler.scale == 8.0 and scaler.clean_steps == 0


def test_the_scale_doubles_after_growth_interval_clean_steps_in_a_row():
    scaler = LossScaler(16.0, growth_interval=3, device=CPU)
    for verdict in [Verdict.CLEAN, Verdict.CLEAN, Verdict.OVERFLOW]:  # the run is broken
        scaler.update(verdict)
    assert scaler.scale == 8.0
    for expected in [8.0, 8.0, 16.0, 16.0]:
        scaler.update(Verdict.CLEAN)
        assert scaler.scale == expected
    assert scaler.clean_steps == 1


def test_clean_gradients_are_divided_by_the_scale_exactly():
    scaler = LossScaler(2.0**10, growth_interval=3, device=CPU)
    values = torch.randn(7, dtype=torch.float64).float()
    param = with_grad(*(values * 2**10).tolist())
    assert scaler.check([param]) is Verdict.CLEAN
    assert torch.equal(param.grad, values)  # a power of two: bitwise


def test_a_non_finite_loss_is_a_fault_and_leaves_the_scale():
    scaler = LossScaler(16.0, growth_interval=3, device=CPU)
    scaler.scale_loss(torch.tensor(float("nan")))
    assert scaler.check([with_grad(1.0, INF)]) is Verdict.NON_FINITE
    scaler.update(Verdict.NON_FINITE)
    assert scaler.scale == 16.0
    assert scaler.check([with_grad(1.0)]) is Verdict.CLEAN, "the next mini-batch starts clean"


def test_an_overflow_at_the_smallest_scale_is_a_fault():
    scaler = LossScaler(2.0, growth_interval=3, device=CPU)
    scaler.update(Verdict.OVERFLOW)
    assert scaler.scale == 1.0
    assert scaler.check([with_grad(INF)]) is Verdict.NON_FINITE


def test_the_state_round_trips():
    scaler = LossScaler(16.0, growth_interval=3, device=CPU)
    scaler.update(Verdict.OVERFLOW)
    scaler.update(Verdict.CLEAN)
    other = LossScaler(2.0**16, growth_interval=3, device=CPU)
    other.load_state_dict(json.loads(json.dumps(scaler.state_dict())))
    assert other.state_dict() == {"scale": 8.0, "clean_steps": 1}


def test_the_initial_scale_must_be_a_power_of_two():
    with pytest.raises(ValidationError, match="power of two"):
        LossScaleSettings(init_scale=1000.0)


def mlp_gradients(dtype: torch.dtype, scaler: LossScaler | None) -> list[torch.Tensor]:
    """Gradients of a sharded MLP's loss, small enough (~1e-8) that float16 loses them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    mp_policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)), mp_policy=mp_policy)
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    loss = model(x).float().pow(2).mean() * 1e-6
    (scaler.scale_loss(loss) if scaler is not None else loss).backward()
    if scaler is not None:
        assert scaler.check(list(model.parameters())) is Verdict.CLEAN
    return [p.grad.full_tensor() for p in model.parameters()]


def relative_error(got: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    difference = torch.cat([(g - e).flatten() for g, e in zip(got, expected, strict=True)])
    return float(difference.norm() / torch.cat([e.flatten() for e in expected]).norm())


def test_unscaled_float16_gradients_equal_float32_ones():
    reference = mlp_gradients(torch.float32, None)
    scaled = mlp_gradients(torch.float16, LossScaler(2.0**16, growth_interval=400, device=CPU))
    unscaled = mlp_gradients(torch.float16, None)
    assert relative_error(scaled, reference) < 2e-3  # float16 rounding of the forward
    assert relative_error(unscaled, reference) > 0.1, "without a scale they underflow"


def fp16_engine(path: str, optim: OptimConfig | None = ADAM, **scaling):
    fsdp = FSDPConfig(param_dtype="float16", loss_scale=LossScaleSettings(**scaling))
    return TrainEngine(PolicyModule(load_causal_lm(path)), device=CPU, fsdp=fsdp, optim=optim)


def backward(engine: TrainEngine, seed: int) -> None:
    """One micro-batch's policy-gradient loss, through the engine (scaled in float16)."""
    batch = rl_batch(rows=4, seed=seed)
    log_probs, _ = policy_forward(engine, batch, CPU, 1.0, packed=False)
    mask = batch["response_mask"].bool()
    engine.backward(-(log_probs * batch["advantages"])[mask].mean())


def local_weights(engine: TrainEngine) -> list[torch.Tensor]:
    return [p.to_local().detach().clone() for p in engine.trainable]


def unchanged(before: list[torch.Tensor], engine: TrainEngine) -> bool:
    """Whether this rank's weight shards are still ``before``."""
    return all(torch.equal(a, b) for a, b in zip(before, local_weights(engine), strict=True))


def poison(engine: TrainEngine) -> None:
    """An infinity in this rank's first non-empty gradient shard, as an overflowing float16
    backward leaves."""
    local = next(g for p in engine.trainable if (g := p.grad.to_local()).numel())
    local.view(-1)[0] = INF


def test_only_a_trained_float16_engine_scales(tiny_model):
    assert fp16_engine(tiny_model).scaler.scale == 2.0**16
    assert fp16_engine(tiny_model, optim=None).scaler is None
    bf16 = FSDPConfig(param_dtype="bfloat16")
    module = PolicyModule(load_causal_lm(tiny_model))
    assert TrainEngine(module, device=CPU, fsdp=bf16, optim=OptimConfig()).scaler is None


def test_an_overflowing_step_is_skipped_without_counting_as_a_fault(tiny_model):
    engine = fp16_engine(tiny_model, init_scale=2.0**10)
    before = local_weights(engine)
    backward(engine, seed=0)
    poison(engine)
    step = engine.step()
    assert step.overflowed and not step.skipped and step.loss_scale == 2.0**10
    assert step.metrics() == {"lr": 1e-3, "skipped_steps": 0.0} | {
        "loss_scale": 2.0**10,
        "loss_scale_skipped": 1.0,
    }, "no gradient norm from gradients that were never unscaled"
    assert engine.scaler.scale == 2.0**9 and engine.steps == 0
    assert all(p.grad is None for p in engine.trainable), "the overflowed gradients are gone"
    assert unchanged(before, engine)

    backward(engine, seed=0)
    step = engine.step()
    assert not step.overflowed and not step.skipped and math.isfinite(step.grad_norm)
    assert engine.steps == 1 and engine.scaler.clean_steps == 1
    assert not unchanged(before, engine)


def test_a_non_finite_loss_in_float16_is_a_skipped_step(tiny_model):
    batch = rl_batch(rows=4, seed=10)
    poisoned = batch.assign(advantages=torch.full_like(batch["advantages"], torch.nan))
    fp16 = config(tiny_model, mini_batches=1, fsdp={"param_dtype": "float16"})
    with in_process(ActorWorker, fp16) as actor:
        metrics = actor.update(poisoned)[0]
    assert metrics["actor/skipped_steps"] == 1.0, "the run's fault guard counts it"
    assert metrics["actor/loss_scale_skipped"] == 0.0
    assert metrics["actor/loss_scale"] == 2.0**16


def test_the_scale_is_saved_and_restored_with_the_engine(tiny_model, tmp_path):
    engine = fp16_engine(tiny_model, growth_interval=5)
    engine.scaler.load_state_dict({"scale": 2.0**7, "clean_steps": 3})
    save_engine(engine, tmp_path)
    saved = json.loads((tmp_path / "engine.json").read_text())["loss_scale"]
    assert saved == {"scale": 128.0, "clean_steps": 3}
    restored = fp16_engine(tiny_model, growth_interval=5)
    load_engine(restored, tmp_path)
    assert restored.scaler.state_dict() == saved


def _two_ranks(rank: int, store: str, model: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        engine = fp16_engine(model, init_scale=2.0**10)
        before = local_weights(engine)
        backward(engine, seed=rank)
        if rank == 1:  # rank 0's shards stay finite
            poison(engine)
        step = engine.step()
        kept = unchanged(before, engine)
        backward(engine, seed=rank)
        clean = engine.step()
        moved = not unchanged(before, engine)
    finally:
        dist.destroy_process_group()
    result = {
        "overflowed": step.overflowed,
        "skipped": step.skipped,
        "kept": kept,
        "scale": engine.scaler.scale,
        "clean_overflowed": clean.overflowed,
        "moved": moved,
        "steps": engine.steps,
    }
    with open(f"{out}.{rank}", "w") as handle:
        json.dump(result, handle)


@pytest.mark.integration
def test_two_ranks_skip_together_when_only_one_overflows(tiny_model, tmp_path):
    out = tmp_path / "result"
    mp.spawn(_two_ranks, args=(str(tmp_path / "store"), tiny_model, str(out)), nprocs=2)
    zero, one = (json.loads((tmp_path / f"result.{r}").read_text()) for r in (0, 1))
    assert zero == one
    assert zero["overflowed"] and not zero["skipped"] and zero["kept"], "rank 0 skipped too"
    assert zero["scale"] == 2.0**9
    assert not zero["clean_overflowed"] and zero["moved"] and zero["steps"] == 1
