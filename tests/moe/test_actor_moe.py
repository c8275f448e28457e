"""The actor on a mixture-of-experts model (a tiny Qwen3-MoE with fused 3-D expert
parameters) under FSDP2: log-probs equal a plain transformers forward, packed and padded
layouts and micro-batch budgets give the same update, the experts and router train."""

import tempfile

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.workers import ActorWorker
from tests.workers.conftest import in_process
from tests.workers.data import rl_batch
from tests.workers.test_actor import (
    assert_same_weights,
    config,
    reference_log_probs,
    updated_weights,
)


@pytest.mark.parametrize("fixture", ["tiny_moe", "tiny_qwen2_moe"])
def test_packed_log_probs_match_a_padded_transformers_forward(request, fixture):
    path = request.getfixturevalue(fixture)
    batch = rl_batch(rows=6, seed=1)
    with in_process(ActorWorker, config(path, tokens_per_micro_batch=20)) as actor:
        out = actor.log_probs(batch)
    expected = reference_log_probs(path, batch, 1.0)
    valid = batch["attention_mask"][:, -5:].bool()
    torch.testing.assert_close(
        out["old_log_probs"][valid].double(), expected[valid], atol=2e-5, rtol=0
    )


@pytest.mark.parametrize("packing", ["packed", "padded"])
def test_the_update_does_not_depend_on_the_layout_or_budget(tiny_moe, packing):
    batch = rl_batch(rows=8, seed=2)
    model = {"path": tiny_moe, "packing": packing}
    one_pass, _ = updated_weights(tiny_moe, batch, tokens_per_micro_batch=10_000, model=model)
    many, _ = updated_weights(tiny_moe, batch, tokens_per_micro_batch=12, model=model)
    assert_same_weights(one_pass, many)
    original = load_causal_lm(tiny_moe).state_dict()
    for name in ("model.layers.0.mlp.experts.gate_up_proj", "model.layers.2.mlp.gate.weight"):
        assert not torch.equal(original[name], many[name]), name


def test_the_load_is_measured_and_the_balancing_loss_trains_the_routers(tiny_moe, tiny_model):
    batch = rl_batch(rows=8, seed=2)
    plain, metrics = updated_weights(tiny_moe, batch)
    assert 0.5 < metrics["actor/moe/aux_loss"] < 4 and metrics["actor/moe/imbalance"] >= 1
    balanced, _ = updated_weights(tiny_moe, batch, router_aux_loss_coef=1.0)
    router = "model.layers.0.mlp.gate.weight"
    assert not torch.equal(plain[router], balanced[router])
    embedding = "model.embed_tokens.weight"  # the loss flows through the router's input too
    assert not torch.equal(plain[embedding], balanced[embedding])
    _, dense = updated_weights(tiny_model, batch)
    assert not any("moe/" in key for key in dense)


def test_lora_adapters_train_on_a_mixture_of_experts(tiny_moe):
    """LoRA on all-linear, which peft (on transformers 5) extends to the fused experts and
    the router as adapted parameters: the log-probs start equal to the plain model's, the
    update trains the adapters only, and the merged weights (what the rollout is sent) give
    the LoRA model's log-probs in a plain transformers model."""
    batch = rl_batch(rows=8, seed=3)
    lora = {"path": tiny_moe, "lora": {"rank": 4, "alpha": 8}}
    with in_process(ActorWorker, config(tiny_moe, model=lora)) as actor:
        before = actor.log_probs(batch)["old_log_probs"]
        metrics = actor.update(batch)[0]
        after = actor.log_probs(batch)["old_log_probs"]
        merged = actor.full_weights()[0]
    valid = batch["attention_mask"][:, -5:].bool()
    expected = reference_log_probs(tiny_moe, batch, 1.0)
    torch.testing.assert_close(before[valid].double(), expected[valid], atol=2e-5, rtol=0)
    assert metrics["actor/moe/imbalance"] >= 1
    original = load_causal_lm(tiny_moe).state_dict()
    assert merged.keys() == original.keys()
    for name in (
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.mlp.experts.gate_up_proj",
        "model.layers.0.mlp.experts.down_proj",
        "model.layers.0.mlp.gate.weight",
    ):
        assert not torch.equal(merged[name], original[name]), name
    plain = load_causal_lm(tiny_moe)
    plain.load_state_dict(merged)
    with tempfile.TemporaryDirectory() as directory:
        plain.save_pretrained(directory)
        merged_log_probs = reference_log_probs(directory, batch, 1.0)
    torch.testing.assert_close(after[valid].double(), merged_log_probs[valid], atol=2e-5, rtol=0)
    assert (after - before)[valid].abs().max() > 1e-3, "the update moved the policy"
