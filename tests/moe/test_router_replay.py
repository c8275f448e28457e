"""Router replay (``actor.router_replay: rollout``): the native engine's routes reach the
actor in the batch (``routed_experts``, lined up with ``input_ids``), the actor's forwards
use them, and the mismatch metrics say how many tokens went elsewhere."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.trainer.rl.loop import train_rl
from ascent.workers import ActorWorker
from ascent.workers.rollout_samples import SampleRollouts
from tests.trainer.rl_setup import config as rl_config
from tests.trainer.rl_setup import metric
from tests.workers.conftest import in_process
from tests.workers.data import rl_batch
from tests.workers.test_actor import config


def rollouts_of(path, dtype=torch.float32):
    """12 sampled responses of the engine on ``path``, as the rollout role lays them out,
    with advantages to train on."""
    batch = rl_batch(rows=6, seed=1).select("prompts", "uid")
    batch = batch.assign(prompt_mask=(batch["prompts"] != 0).long())  # left padding is 0
    prompts = [row[row != 0].tolist() for row in batch["prompts"]]
    engine = NativeEngine(
        load_causal_lm(path, dtype=dtype), EngineLimits(max_num_seqs=8, max_model_len=128)
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=10, n=2, seed=3)
    rollouts = SampleRollouts(None, pad_id=0, weight_version=lambda: 0).collect(
        batch, engine.generate(prompts, params), params
    )
    advantages = torch.randn(
        rollouts["responses"].shape, generator=torch.Generator().manual_seed(0)
    )
    return rollouts.assign(advantages=advantages * rollouts["response_mask"])


def run(path, batch, **overrides):
    """Old log-probs and the update's metrics of one actor."""
    with in_process(ActorWorker, config(path, mini_batches=1, **overrides)) as actor:
        old = actor.log_probs(batch)["old_log_probs"]
        return old, actor.update(batch.assign(old_log_probs=old))[0]


@pytest.mark.parametrize("fixture", ["tiny_moe", "tiny_deepseek", "tiny_mixtral"])
def test_the_rollouts_routes_line_up_with_the_trainers(request, fixture):
    """Replaying the routes the trainer would take anyway changes nothing: the replayed
    router weighs them as the router itself does (softmax for Qwen, DeepSeek's scaled
    sigmoid scores), so the log-probs are the plain forward's."""
    path = request.getfixturevalue(fixture)
    rollouts = rollouts_of(path)
    routes = rollouts["routed_experts"]
    assert routes.shape == (12, rollouts["input_ids"].shape[1], 2, 2)  # 2 sparse layers, k 2
    real = rollouts["attention_mask"].bool()
    last = real.long().cumsum(-1) == real.sum(-1, keepdim=True)  # each row's last token
    assert ((routes >= 0).all(-1).all(-1) == (real & ~last)).all(), "recorded where fed back"
    plain, plain_metrics = run(path, rollouts)
    replayed, metrics = run(path, rollouts, router_replay="rollout")
    # float32 engine and trainer route alike: replaying changes nothing
    assert plain_metrics["actor/moe/routing_mismatch"] == 0
    assert metrics["actor/moe/routing_mismatch"] == 0
    assert metrics["actor/moe/routing_mismatch_natural"] == 0
    torch.testing.assert_close(replayed, plain, atol=1e-6, rtol=0)


def other_experts(routes, rows, layer=0, experts=4):
    """``routes`` with sparse layer ``layer`` of every recorded token of ``rows`` sent to
    two experts it did not choose (of ``experts``): a different set for each of them."""
    changed = routes.clone()
    chosen = changed[rows, :, layer].long()
    recorded = (chosen >= 0).all(-1)
    unused = torch.ones(*chosen.shape[:2], experts, dtype=torch.bool)
    unused.scatter_(-1, chosen.clamp(min=0), False)
    others = unused.long().argsort(dim=-1, descending=True, stable=True)[..., :2]
    changed[rows, :, layer] = torch.where(recorded[..., None], others, chosen).to(routes.dtype)
    return changed, int(recorded.sum())


@pytest.mark.parametrize(
    ("fixture", "experts"), [("tiny_moe", 4), ("tiny_deepseek", 8), ("tiny_mixtral", 4)]
)
def test_replay_uses_the_rollouts_routes_and_measures_the_difference(request, fixture, experts):
    path = request.getfixturevalue(fixture)
    rollouts = rollouts_of(path)
    changed, count = other_experts(rollouts["routed_experts"], slice(0, 4), experts=experts)
    recorded = int((rollouts["routed_experts"] >= 0).all(-1).all(-1).sum())
    batch = rollouts.assign(routed_experts=changed)

    plain, plain_metrics = run(path, batch)
    replayed, metrics = run(path, batch, router_replay="rollout")
    share = count / recorded
    assert plain_metrics["actor/moe/routing_mismatch"] == pytest.approx(share)
    assert metrics["actor/moe/routing_mismatch"] == 0  # the forward used the rollout's
    assert metrics["actor/moe/routing_mismatch_natural"] == pytest.approx(share)
    valid = batch["response_mask"].bool()
    moved = (replayed - plain).abs()
    assert moved[:4][valid[:4]].min() > 0, "every response token of the replayed rows moved"
    assert moved[4:][valid[4:]].max() < 1e-6, "the rows left alone did not"


def test_replay_needs_the_routes(tiny_moe):
    batch = rollouts_of(tiny_moe)
    with pytest.raises(Exception, match="needs batch field 'routed_experts'"):
        run(tiny_moe, batch.drop("routed_experts"), router_replay="rollout")


def test_an_rl_run_replays_the_rollouts_routes(tiny_moe, prompts, tmp_path):
    """The whole path: the plan, the colocated native engine in bfloat16 (so that some
    routes differ), the rollout role's batch, the actor's replay in every forward."""
    run_dir = tmp_path / "run"
    overrides = ("actor.router_replay=rollout", "rollout.dtype=bfloat16", "trainer.total_steps=2")
    train_rl(rl_config(tiny_moe, prompts, run_dir, *overrides))
    assert metric(run_dir, "actor/moe/routing_mismatch") == [0.0, 0.0]
    natural = metric(run_dir, "actor/moe/routing_mismatch_natural")
    assert len(natural) == 2 and all(0 <= share < 0.5 for share in natural)
