"""The actor and reference with images (a tiny Qwen2.5-VL): log-probs equal to a plain
transformers forward that computes its own multimodal positions, packed and padded layouts
and micro-batch budgets giving the same update, the vision tower trained or frozen, LoRA."""

import pytest
import torch

from ascent.models import load_causal_lm
from ascent.vision.processing import VisionProcessor
from ascent.workers import ActorWorker, ReferenceConfig, ReferenceWorker
from tests.vision.data import vision_rl_batch
from tests.workers.conftest import in_process
from tests.workers.test_actor import assert_same_weights, config


def transformers_log_probs(model_dir, batch):
    """Each row alone through ``Qwen2_5_VLForConditionalGeneration`` with its pixel values,
    grids and ``mm_token_type_ids``, from which the model derives its own M-RoPE positions."""
    model = load_causal_lm(model_dir).eval()
    processor = VisionProcessor(model_dir)
    image_token = model.config.image_token_id
    width = batch["responses"].shape[1]
    out = torch.zeros(len(batch), width, dtype=torch.float64)
    for row in range(len(batch)):
        valid = batch["attention_mask"][row].bool()
        ids = batch["input_ids"][row][valid][None]
        extra = {}
        if batch["images"][row]:
            inputs = processor(batch["images"][row])
            extra = {
                "pixel_values": inputs.pixel_values,
                "image_grid_thw": inputs.grid_thw,
                "mm_token_type_ids": (ids == image_token).int(),
            }
        model.model.rope_deltas = None  # the model caches them between calls
        with torch.no_grad():
            logits = model(input_ids=ids, use_cache=False, **extra).logits[0].double()
        length = int(batch["response_mask"][row].sum())
        targets = batch["responses"][row, :length]
        logp = torch.log_softmax(logits[-length - 1 : -1], dim=-1)
        out[row, :length] = logp.gather(-1, targets[:, None]).squeeze(-1)
    return out


@pytest.mark.parametrize("packing", ["packed", "padded"])
def test_log_probs_with_images_match_transformers(tiny_vlm, packing):
    batch = vision_rl_batch(tiny_vlm, rows=6, seed=1)
    assert sum(len(urls) for urls in batch["images"]) == 6  # rows of 0, 1 and 2 images
    settings = config(
        tiny_vlm, model={"path": tiny_vlm, "packing": packing}, tokens_per_micro_batch=60
    )
    with in_process(ActorWorker, settings) as actor:
        out = actor.log_probs(batch)["old_log_probs"]
    expected = transformers_log_probs(tiny_vlm, batch)
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(out[mask].double(), expected[mask], atol=2e-5, rtol=0)


def test_images_change_the_log_probs(tiny_vlm):
    """The images reach the model: other pixels at the same tokens give other log-probs."""
    batch = vision_rl_batch(tiny_vlm, rows=3, seed=2)
    other = vision_rl_batch(tiny_vlm, rows=3, seed=3)
    assert torch.equal(batch["prompts"], other["prompts"])  # images of the same sizes
    swapped = batch.assign(images=other["images"])
    with in_process(ActorWorker, config(tiny_vlm)) as actor:
        original = actor.log_probs(batch)["old_log_probs"]
        changed = actor.log_probs(swapped)["old_log_probs"]
    assert (original[:2] - changed[:2]).abs().max() > 1e-4
    torch.testing.assert_close(original[2], changed[2], atol=0, rtol=0)  # the text-only row


def vision_weights(weights):
    return {name: w for name, w in weights.items() if ".visual." in name}


@pytest.mark.parametrize("packing", ["packed", "padded"])
def test_the_update_with_images_does_not_depend_on_layout_or_micro_batches(tiny_vlm, packing):
    batch = vision_rl_batch(tiny_vlm, rows=6, seed=4)
    reference = None
    for budget in (10_000, 50):
        model = {"path": tiny_vlm, "packing": packing}
        with in_process(
            ActorWorker, config(tiny_vlm, model=model, tokens_per_micro_batch=budget)
        ) as actor:
            initial = actor.full_weights()[0]
            actor.update(batch)
            weights = actor.full_weights()[0]
        if reference is None:
            reference = weights
            moved = [
                n for n, w in vision_weights(weights).items() if not torch.equal(w, initial[n])
            ]
            assert len(moved) == len(vision_weights(weights)), "the whole vision tower trains"
        else:
            assert_same_weights(reference, weights, atol=1e-6)


def test_packed_and_padded_updates_agree(tiny_vlm):
    batch = vision_rl_batch(tiny_vlm, rows=6, seed=5)
    results = []
    for packing in ("packed", "padded"):
        with in_process(
            ActorWorker, config(tiny_vlm, model={"path": tiny_vlm, "packing": packing})
        ) as actor:
            metrics = actor.update(batch)[0]
            results.append((actor.full_weights()[0], metrics))
    assert_same_weights(results[0][0], results[1][0], atol=1e-6)
    assert results[0][1]["actor/grad_norm"] == pytest.approx(
        results[1][1]["actor/grad_norm"], rel=1e-5
    )


def test_a_frozen_vision_tower_stays_put(tiny_vlm):
    batch = vision_rl_batch(tiny_vlm, rows=4, seed=6)
    model = {"path": tiny_vlm, "vision_tower": "freeze"}
    with in_process(ActorWorker, config(tiny_vlm, model=model)) as actor:
        initial = actor.full_weights()[0]
        actor.update(batch)
        weights = actor.full_weights()[0]
    tower = vision_weights(weights)
    assert tower and all(torch.equal(w, initial[n]) for n, w in tower.items())
    text = [n for n in weights if n not in tower]
    assert any(not torch.equal(weights[n], initial[n]) for n in text)


def test_lora_with_images(tiny_vlm):
    """LoRA adapters start as the identity (B = 0), train, and disabling them gives the
    base model: the reference worker's log-probs."""
    batch = vision_rl_batch(tiny_vlm, rows=4, seed=7)
    lora = {"rank": 4, "alpha": 8}
    with in_process(ActorWorker, config(tiny_vlm, model={"path": tiny_vlm, "lora": lora})) as actor:
        before = actor.log_probs(batch)["old_log_probs"]
        for _ in range(2):
            actor.update(batch)
        after = actor.log_probs(batch)["old_log_probs"]
        reference = actor.ref_log_probs(batch)["ref_log_probs"]
    with in_process(ReferenceWorker, ReferenceConfig(model={"path": tiny_vlm})) as ref:
        base = ref.log_probs(batch)["ref_log_probs"]
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(before[mask], base[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(reference[mask], base[mask], atol=1e-5, rtol=0)
    assert (after[mask] - before[mask]).abs().max() > 1e-4


def test_the_critic_reads_the_images_and_learns_values(tiny_vlm):
    """A value head on the vision-language backbone: packed equals padded, the images change
    the values, and regression on fixed returns lowers the value loss."""
    from ascent.workers import CriticConfig, CriticWorker

    batch = vision_rl_batch(tiny_vlm, rows=6, seed=8)
    values = {}
    for packing in ("packed", "padded"):
        model = {"path": tiny_vlm, "packing": packing}
        with in_process(CriticWorker, CriticConfig(model=model, optim={"lr": 1e-2})) as critic:
            values[packing] = critic.values(batch)["values"]
            if packing == "padded":
                other = vision_rl_batch(tiny_vlm, rows=6, seed=9)
                swapped = critic.values(batch.assign(images=other["images"]))["values"]
                target = torch.where(batch["response_mask"].bool(), 1.0, 0.0)
                losses = []
                for _ in range(4):
                    current = critic.values(batch)["values"]
                    step = critic.update(batch.assign(values=current, returns=target))[0]
                    losses.append(step["critic/vf_loss"])
    mask = batch["response_mask"].bool()
    torch.testing.assert_close(values["packed"][mask], values["padded"][mask], atol=1e-5, rtol=0)
    assert (swapped[:2] - values["padded"][:2]).abs().max() > 1e-5
    assert losses[-1] < losses[0]
