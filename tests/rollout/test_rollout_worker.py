"""The rollout role with the actor: batch layout, log-prob agreement with the trainer, and
weights refreshed after an update (in place when colocated, in buckets when separate)."""

import torch

from ascent.batch import Batch
from ascent.controller import ResourcePool, Role, spawn_group, spawn_groups
from ascent.models import load_causal_lm
from ascent.rollout import sync_weights
from ascent.workers import ActorConfig, ActorWorker
from ascent.workers.rollout import RolloutConfig, RolloutWorker
from tests.rollout.test_native_engine import hf_greedy


def prompts_batch():
    prompts = torch.tensor(
        [[0, 0, 0, 71, 72, 73], [10, 11, 12, 13, 14, 15], [0, 40, 41, 42, 43, 44]]
    )
    mask = (torch.arange(6) >= torch.tensor([3, 0, 1])[:, None]).long()
    return Batch.from_dict({"prompts": prompts * mask, "prompt_mask": mask, "uid": ["a", "b", "c"]})


def rollout_config(path, **sampling):
    settings = {"n": 2, "max_new_tokens": 8, "temperature": 1.0, "seed": 0} | sampling
    return RolloutConfig(model={"path": path}, sampling=settings, max_model_len=64, max_num_seqs=4)


def colocated(path, lr=0.05, temperature=1.0):
    actor = ActorConfig(model={"path": path}, optim={"lr": lr}, temperature=temperature)
    return spawn_groups(
        {
            "actor": Role(ActorWorker, args=(actor,)),
            "rollout": Role(RolloutWorker, args=(rollout_config(path),)),
        },
        ResourcePool(),
        backend="in-process",
    )


def test_generate_returns_the_training_layout(tiny_model):
    with spawn_group(
        RolloutWorker, ResourcePool(), args=(rollout_config(tiny_model),), backend="in-process"
    ) as rollout:
        out = rollout.generate(prompts_batch(), sampling={"stop_token_ids": [5, 6, 7]})
    assert len(out) == 6 and out["uid"] == ["a", "a", "b", "b", "c", "c"]
    assert out["responses"].shape == (6, 8) and out["input_ids"].shape == (6, 14)
    lengths = out["response_mask"].sum(-1).tolist()
    for row, (length, reason) in enumerate(zip(lengths, out["finish_reason"], strict=True)):
        mask = out["response_mask"][row]
        assert mask[:length].all() and not mask[length:].any()
        assert (reason == "length") == (length == 8)
        assert torch.equal(out["attention_mask"][row], torch.cat([out["prompt_mask"][row], mask]))
        assert (out["rollout_log_probs"][row, :length] < 0).all()
    assert out.meta["weight_version"] == 0


def test_rollout_log_probs_match_the_trainers(tiny_model):
    groups = colocated(tiny_model, temperature=0.7)  # the trainer divides by the same T
    actor, rollout = groups["actor"], groups["rollout"]
    try:
        out = rollout.generate(prompts_batch(), sampling={"temperature": 0.7, "n": 4})
        trainer = actor.log_probs(out)["old_log_probs"]
    finally:
        actor.shutdown()
    mask = out["response_mask"].bool()
    difference = (trainer - out["rollout_log_probs"])[mask].abs().max().item()
    print(f"max |rollout - trainer| log-prob: {difference:.2e}")
    assert difference < 1e-4


def test_colocated_refresh_is_in_place_and_generation_follows_the_update(tiny_model):
    groups = colocated(tiny_model)
    actor, rollout = groups["actor"], groups["rollout"]
    host = actor.hosts.host
    try:
        greedy = {"temperature": 0.0, "n": 1}
        before = rollout.generate(prompts_batch(), sampling=greedy)
        result = rollout.sync_from_colocated("actor", check=True, version=1)[0]
        assert result == {"weight_version": 1, "max_weight_difference": 0.0}
        # In place: the engine's tensors are the actor's own storage.
        actor_weight = host.workers["actor"].engine.module.model.lm_head.weight.to_local()
        engine_weight = host.workers["rollout"].engine.model.lm_head.weight
        assert engine_weight.data_ptr() == actor_weight.data_ptr()

        batch = before.union(actor.log_probs(before)).assign(advantages=torch.ones(3, 8))
        actor.update(batch)
        assert rollout.sync_from_colocated("actor", check=True, version=2)[0]["weight_version"] == 2
        after = rollout.generate(prompts_batch(), sampling=greedy)
        weights = actor.full_weights()[0]
    finally:
        actor.shutdown()
    assert after.meta["weight_version"] == 2
    assert not torch.equal(before["responses"], after["responses"]), "the update changed greedy"
    updated = load_causal_lm(tiny_model)
    updated.load_state_dict(weights)
    for row in range(3):
        prompt = before["prompts"][row][before["prompt_mask"][row].bool()].tolist()
        assert after["responses"][row].tolist() == hf_greedy(updated, prompt, 8)


def test_bucketed_sync_to_a_separate_rollout(tiny_model):
    actor_cfg = ActorConfig(model={"path": tiny_model}, optim={"lr": 0.05})
    with (
        spawn_group(ActorWorker, ResourcePool(), args=(actor_cfg,), backend="in-process") as actor,
        spawn_group(
            RolloutWorker, ResourcePool(), args=(rollout_config(tiny_model),), backend="in-process"
        ) as rollout,
    ):
        batch = rollout.generate(prompts_batch())
        actor.update(batch.union(actor.log_probs(batch)).assign(advantages=torch.ones(6, 8)))
        assert actor.weight_bucket_count(64 * 1024) > 3  # small buckets: several transfers
        assert sync_weights(actor, rollout, 1, bucket_bytes=64 * 1024) == 1
        assert rollout.weight_difference(actor.full_weights()[0]) == [0.0]
