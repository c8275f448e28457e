"""GRPO steps on the real model: the tied embedding / output head stays one tensor through
FSDP2 (two ranks), LoRA, the rollout engine's weight refresh and ``ascent export``; the
rollout/trainer log-prob mismatch is reported every step and stays small after refreshes
(a refresh that missed the tied head would show here); the exported model is the trained
one and loads in transformers. The LoRA run is in ``make test``; the two-rank run (Ray, about
80 s) in ``make test-slow``."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from ascent.cli import main
from ascent.config import load_config
from ascent.models import load_tokenizer
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams
from ascent.trainer.rl.config import RLConfig
from ascent.trainer.rl.loop import train_rl

STEPS = 2


def run(smollm2, real_task, run_dir, *overrides):
    """STEPS GRPO steps (2 prompts x 4 samples x 8 tokens) at a rate that moves the weights,
    exported by the run; returns the run's metrics records."""
    config = load_config(
        RLConfig,
        None,
        [
            f"model.path={smollm2}",
            f"data.train_files=[{real_task['train']}]",
            "data.prompts_per_step=2",
            "rollout.samples_per_prompt=4",
            "rollout.max_response_length=8",
            "algorithm.name=grpo",
            "algorithm.kl.mode=none",
            "actor.optim.lr=1e-4",
            # The share of digits in the response: a score that differs between samples, so
            # every step has advantages and moves the weights.
            "reward.function=tests.rewards.scorers:digit_share",
            "reward.workers=0",
            f"trainer.run_dir={run_dir}",
            f"trainer.total_steps={STEPS}",
            "trainer.val_every=0",
            "trainer.val_at_start=false",
            "trainer.progress_bar=false",
            "trainer.resume=off",
            "tracking.sinks=[jsonl]",
            *overrides,
        ],
    )
    train_rl(config)
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if "timing_s/step" in m]


def check_tied_export(smollm2, run_dir, tmp_path):
    """The run's export: tied in transformers, different from the base, equal to what
    ``ascent export`` writes from the checkpoint; the native engine loaded from it greedily
    generates what transformers generates."""
    exported = run_dir / "hf"
    again = tmp_path / "again"
    assert main(["export", str(run_dir), str(again)]) == 0
    live, from_checkpoint = (
        load_file(exported / "model.safetensors"),
        load_file(again / "model.safetensors"),
    )
    assert "lm_head.weight" not in live  # tied: stored once
    assert all(torch.equal(live[k], from_checkpoint[k]) for k in live)
    base = load_file(f"{smollm2}/model.safetensors")
    name = "model.embed_tokens.weight"
    assert not torch.equal(live[name], base[name]) or any(
        not torch.equal(live[k], base[k]) for k in live
    )
    model = AutoModelForCausalLM.from_pretrained(exported, local_files_only=True).eval()
    assert model.lm_head.weight is model.get_input_embeddings().weight
    tokenizer = load_tokenizer(exported)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 7 + 5? Answer with the number only."}],
        add_generation_prompt=True,
    )
    ids = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    with torch.no_grad():
        expected = model.generate(
            torch.tensor([ids]), do_sample=False, max_new_tokens=12, pad_token_id=0
        )[0, len(ids) :].tolist()
    engine = NativeEngine(model, EngineLimits(max_num_seqs=1, max_model_len=128))
    greedy = SamplingParams(
        temperature=0, max_new_tokens=12, stop_token_ids=[tokenizer.eos_token_id]
    )
    [sample] = engine.generate([ids], greedy)
    assert sample.token_ids == expected


def check_mismatch(metrics):
    """Every step reports the engine-vs-trainer mismatch, and it stays at float noise after
    the weights changed (step 2 samples from refreshed weights)."""
    assert len(metrics) == STEPS
    mismatch = [m["rollout/mismatch_kl"] for m in metrics]
    assert all(abs(value) < 1e-3 for value in mismatch), mismatch
    assert all(m["actor/grad_norm"] > 0 for m in metrics)


@pytest.mark.slow
@pytest.mark.integration
def test_full_fine_tuning_over_two_fsdp2_ranks_keeps_the_head_tied(
    smollm2, real_task, tmp_path, local_ray
):
    run_dir = tmp_path / "run"
    metrics = run(
        smollm2,
        real_task,
        run_dir,
        "resources.devices_per_node=2",
        "resources.cpus_per_worker=1",
    )
    check_mismatch(metrics)
    check_tied_export(smollm2, run_dir, tmp_path)


def test_lora_on_the_tied_model_merges_into_a_tied_export(smollm2, real_task, tmp_path):
    run_dir = tmp_path / "run"
    metrics = run(smollm2, real_task, run_dir, "model.lora.rank=8", "actor.optim.lr=1e-3")
    check_mismatch(metrics)
    check_tied_export(smollm2, run_dir, tmp_path)
