"""LoRA trains only adapters and keeps the base model as reference; the critic learns."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.workers import ActorConfig, ActorWorker, CriticConfig, CriticWorker
from tests.workers.conftest import in_process
from tests.workers.data import rl_batch
from tests.workers.test_actor import SMOOTH_ADAM, reference_log_probs


def test_lora_changes_only_adapters_and_its_reference_is_the_base_model(tiny_model):
    lora = {"path": tiny_model, "lora": {"rank": 4, "alpha": 8}}
    cfg = ActorConfig.model_validate({"model": lora, "optim": {"lr": 0.05}})
    batch = rl_batch(rows=8, seed=7)
    valid = batch["attention_mask"][:, -5:].bool()
    base = reference_log_probs(tiny_model, batch, 1.0)
    with in_process(ActorWorker, cfg) as actor:
        before = actor.full_weights()[0]
        trainable = actor_named_trainable(actor)
        assert trainable and all("lora_" in name for name, _ in trainable)
        # peft initialises B = 0: the adapted model starts as the base model.
        torch.testing.assert_close(
            actor.log_probs(batch)["old_log_probs"][valid].double(), base[valid], atol=2e-5, rtol=0
        )
        for _ in range(3):
            actor.update(batch)
        after_policy = actor.log_probs(batch)["old_log_probs"]
        reference = actor.ref_log_probs(batch)["ref_log_probs"]
        merged = actor.full_weights()[0]
    torch.testing.assert_close(reference[valid].double(), base[valid], atol=2e-5, rtol=0)
    assert (after_policy[valid] - reference[valid]).abs().max() > 1e-3, "the adapters learned"
    # Merged weights: targeted linear weights moved, everything else is bit-identical.
    plain = load_causal_lm(tiny_model).state_dict()
    assert (
        before.keys()
        == merged.keys()
        == {k for k in plain if k != "lm_head.weight"} | {"lm_head.weight"}
    )
    moved = {k for k in merged if not torch.equal(merged[k], plain[k])}
    assert moved and all(k.endswith("proj.weight") for k in moved)
    assert torch.equal(merged["model.embed_tokens.weight"], plain["model.embed_tokens.weight"])


def actor_named_trainable(group):
    module = group.hosts.host.workers[group.role].engine.module  # in-process: reachable
    return [(n, p) for n, p in module.named_parameters() if p.requires_grad]


@pytest.mark.parametrize(
    ("lora", "lr"), [(None, 3e-3), ({"rank": 8, "alpha": 16}, 1e-2)], ids=["full", "lora"]
)
def test_critic_value_loss_falls_on_a_fixed_target(tiny_model, lora, lr):
    """All weights, or LoRA adapters with the value head trained whole (``critic.model.lora``)."""
    cfg = CriticConfig.model_validate(
        {"model": {"path": tiny_model, "lora": lora}, "optim": {"lr": lr}, "value_clip": None}
    )
    batch = rl_batch(rows=8, seed=8)
    target = torch.where(batch["response_mask"].bool(), 1.5, 0.0)
    losses = []
    with in_process(CriticWorker, cfg) as critic:
        trainable = [name for name, _ in actor_named_trainable(critic)]
        adapters = [name for name in trainable if "lora_" in name]
        head = [name for name in trainable if ".score." in name]
        assert head and bool(adapters) == (lora is not None)
        if lora is not None:  # nothing else trains
            assert sorted(adapters + head) == sorted(trainable)
        for _ in range(12):
            values = critic.values(batch)["values"]
            metrics = critic.update(batch.assign(values=values, returns=target))[0]
            losses.append(metrics["critic/vf_loss"])
    assert losses[-1] < 0.2 * losses[0], losses
    assert all(torch.isfinite(torch.tensor(losses)))


def test_critic_value_clip_bounds_the_move(tiny_model):
    cfg = CriticConfig.model_validate(
        {"model": {"path": tiny_model}, "optim": SMOOTH_ADAM, "value_clip": 0.01}
    )
    batch = rl_batch(rows=8, seed=9)
    with in_process(CriticWorker, cfg) as critic:
        values = critic.values(batch)["values"]
        far = torch.where(batch["response_mask"].bool(), values + 10.0, 0.0)
        metrics = critic.update(batch.assign(values=values, returns=far))[0]
    assert metrics["critic/vf_clipfrac"] == 0.0  # the unclipped error is larger everywhere
    assert metrics["critic/vf_loss"] > 40  # 0.5 * 10^2


def test_lora_on_the_output_head_is_scored_and_trained_through_the_chunked_head(tiny_model):
    """The log-prob head reads the head's weight in chunks: with adapters on the head it
    scores with W + (alpha / r) B A, as the adapted model's own forward does."""
    from ascent.engine.config import LoraSettings
    from ascent.engine.modules import PolicyModule
    from ascent.models.lora import apply_lora

    settings = LoraSettings(rank=4, alpha=8, target_modules=["lm_head", "q_proj"])
    model = apply_lora(load_causal_lm(tiny_model), settings, seed=3)
    head = model.get_output_embeddings()
    with torch.no_grad():
        head.lora_B["default"].weight.normal_(0, 0.5)  # peft starts B at 0: no effect yet
    ids = torch.tensor([[5, 17, 42, 99, 7, 13, 21, 8]])
    positions = torch.arange(8).unsqueeze(0)
    targets = torch.tensor([17, 42, 99, 7, 13, 21, 8, 3])
    module = PolicyModule(model, chunk_tokens=3)
    log_probs, _ = module(ids, position_ids=positions, query_index=torch.arange(8), targets=targets)
    logits = model(input_ids=ids, position_ids=positions).logits[0].float()
    expected = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None])[:, 0]
    torch.testing.assert_close(log_probs, expected, atol=1e-5, rtol=0)
    with model.disable_adapter():
        plain, _ = module(ids, position_ids=positions, query_index=torch.arange(8), targets=targets)
    assert (plain - log_probs).abs().max() > 1e-3  # the head's adapter counts
    log_probs.sum().backward()
    assert head.lora_A["default"].weight.grad.abs().sum() > 0
    assert head.lora_B["default"].weight.grad.abs().sum() > 0
