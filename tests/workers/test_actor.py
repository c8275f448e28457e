"""The actor on one rank: log-probs against plain transformers, and the properties of an update
that must hold whatever the engine does inside (micro-batching, masking, checkpointing, LoRA)."""

import math

import pytest
import torch
from pydantic import ValidationError

from ascent.models import load_causal_lm
from ascent.workers import ActorConfig, ActorWorker
from tests.workers.conftest import in_process
from tests.workers.data import rl_batch


def reference_log_probs(model_dir, batch, temperature):
    """log softmax(logits / T) of each response token, from a padded transformers forward."""
    model = load_causal_lm(model_dir)
    mask = batch["attention_mask"]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=mask, position_ids=positions
        ).logits.double()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    r = batch["responses"].shape[1]
    predicted = logp[:, -r - 1 : -1].gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    return predicted * mask[:, -r:]


# AdamW divides by sqrt(v) + eps: with the default eps a gradient element near zero moves by
# up to lr whatever its rounding, so comparing two runs would test Adam, not the engine. With
# eps = 1 the update is ~ lr * g: smooth in the gradient, and still the real optimiser path.
SMOOTH_ADAM = {"lr": 0.1, "eps": 1.0}


def config(path, **overrides):
    settings = {"model": {"path": path}, "optim": SMOOTH_ADAM, "mini_batches": 2}
    return ActorConfig.model_validate(settings | overrides)


def updated_weights(path, batch, **overrides):
    with in_process(ActorWorker, config(path, **overrides)) as actor:
        metrics = actor.update(batch)[0]
        return actor.full_weights()[0], metrics


def assert_same_weights(a, b, atol=1e-7):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=atol, msg=name)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("fixture", ["tiny_model", "tiny_tied_model"])
def test_packed_log_probs_match_a_padded_transformers_forward(request, fixture, temperature):
    path = request.getfixturevalue(fixture)
    batch = rl_batch(rows=6, seed=1)
    with in_process(
        ActorWorker, config(path, temperature=temperature, tokens_per_micro_batch=20)
    ) as actor:
        out = actor.log_probs(batch)
    expected = reference_log_probs(path, batch, temperature)
    valid = batch["attention_mask"][:, -5:].bool()
    torch.testing.assert_close(
        out["old_log_probs"][valid].double(), expected[valid], atol=2e-5, rtol=0
    )
    assert (out["entropy"][valid] > 0).all() and (out["old_log_probs"][~valid] == 0).all()


@pytest.mark.parametrize("packing", ["packed", "padded"])
def test_the_update_does_not_depend_on_the_micro_batch_budget(tiny_model, packing):
    batch = rl_batch(rows=8, seed=2)
    model = {"path": tiny_model, "packing": packing}
    one_pass, metrics_one = updated_weights(
        tiny_model, batch, tokens_per_micro_batch=10_000, model=model
    )
    many, metrics_many = updated_weights(tiny_model, batch, tokens_per_micro_batch=12, model=model)
    assert_same_weights(one_pass, many)
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/entropy"):
        assert metrics_one[key] == pytest.approx(metrics_many[key], rel=1e-5), key
    original = load_causal_lm(tiny_model).state_dict()
    assert not torch.equal(
        original["model.layers.0.mlp.up_proj.weight"], many["model.layers.0.mlp.up_proj.weight"]
    )


def test_masked_tokens_have_no_influence_on_the_update(tiny_model):
    batch = rl_batch(rows=8, seed=3)
    masked = ~batch["response_mask"].bool()
    assert masked.any() and batch["attention_mask"][:, -5:][masked].any(), "tool tokens present"
    garbage = batch.assign(
        advantages=torch.where(masked, torch.nan, batch["advantages"]),
        old_log_probs=torch.where(masked, 1e6, torch.zeros_like(batch["advantages"])),
    )
    clean = batch.assign(old_log_probs=torch.zeros_like(batch["advantages"]))
    weights_clean, _ = updated_weights(tiny_model, clean)
    weights_garbage, metrics = updated_weights(tiny_model, garbage)
    assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/skipped_steps"] == 0
    assert_same_weights(weights_clean, weights_garbage, atol=0)


def test_gradient_checkpointing_gives_the_same_update(tiny_model):
    batch = rl_batch(rows=8, seed=4)
    plain, _ = updated_weights(tiny_model, batch)
    checkpointed, _ = updated_weights(
        tiny_model, batch, model={"path": tiny_model, "gradient_checkpointing": True}
    )
    assert_same_weights(plain, checkpointed)


def test_kl_loss_entropy_bonus_and_rollout_correction_are_applied(tiny_model):
    batch = rl_batch(rows=8, seed=5)
    with in_process(ActorWorker, config(tiny_model)) as actor:
        old = actor.log_probs(batch)["old_log_probs"]
    batch = batch.assign(
        old_log_probs=old,
        ref_log_probs=old - 0.1,
        rollout_log_probs=old
        + 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(0)),
    )
    _, metrics = updated_weights(
        tiny_model,
        batch,
        kl_coef=0.1,
        entropy_coef=0.01,
        rollout_correction={"mode": "truncate", "upper": 1.2},
        loss={"name": "ppo", "params": {"clip_high": 0.28}},
    )
    assert metrics["actor/kl_loss"] > 0 and metrics["actor/entropy"] > 0
    assert 0 < metrics["actor/rollout_truncated_frac"] < 1
    assert metrics["actor/rollout_mismatch_k3"] > 0


def test_rejection_applies_when_anchored_at_the_rollout(tiny_model):
    """Anchored at the rollout the ratio is the importance weight (truncation is dropped), but
    masking and rejection still drop samples: every sequence past the bound leaves the loss,
    and with no KL or entropy term the loss has no gradient."""
    batch = rl_batch(rows=8, seed=7)
    with in_process(ActorWorker, config(tiny_model)) as actor:
        old = actor.log_probs(batch)["old_log_probs"]
    noise = 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(1))
    batch = batch.assign(old_log_probs=old, rollout_log_probs=old + noise)
    settings = {"anchor": "rollout", "mode": "reject_max_abs", "reject_above": 1e-3}
    _, metrics = updated_weights(tiny_model, batch, rollout_correction=settings)
    assert metrics["actor/rollout_masked_seq_frac"] == metrics["actor/rollout_masked_frac"] == 1
    assert metrics["actor/pg_loss"] == 0 and metrics["actor/grad_norm"] == 0
    truncate = {"anchor": "rollout", "mode": "truncate", "upper": 1.01}
    _, metrics = updated_weights(tiny_model, batch, rollout_correction=truncate)
    assert metrics["actor/rollout_truncated_frac"] == 0 and metrics["actor/grad_norm"] > 0


def test_full_weights_load_into_a_plain_transformers_model(tiny_model, tmp_path):
    batch = rl_batch(rows=8, seed=6)
    with in_process(ActorWorker, config(tiny_model)) as actor:
        actor.update(batch)
        weights = actor.full_weights()[0]
        after = actor.log_probs(batch)["old_log_probs"]
    model = load_causal_lm(tiny_model)
    model.load_state_dict(weights, strict=True)
    model.save_pretrained(tmp_path)
    expected = reference_log_probs(str(tmp_path), batch, 1.0)
    valid = batch["attention_mask"][:, -5:].bool()
    torch.testing.assert_close(after[valid].double(), expected[valid], atol=2e-5, rtol=0)


def test_bad_input_is_named(tiny_model):
    with in_process(ActorWorker, config(tiny_model)) as actor:
        with pytest.raises(Exception, match=r"needs batch fields \['advantages'\]"):
            actor.update(rl_batch().drop("advantages"))
        with pytest.raises(Exception, match="ref_log_probs"):
            actor.ref_log_probs(rl_batch())  # no LoRA: the reference is its own role
    with pytest.raises(ValidationError, match="tokens_per_microbatch"):
        ActorConfig.model_validate({"model": {"path": tiny_model}, "tokens_per_microbatch": 3})
    with pytest.raises(Exception, match="no model at"):
        in_process(ActorWorker, config("/nonexistent/model"))
