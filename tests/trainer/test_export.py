"""``ascent export CHECKPOINT OUT_DIR`` writes what the trained policy is: the same weights
as the live run's own export (gathered from the FSDP workers), loadable by transformers
``from_pretrained``, with the same greedy generations; LoRA runs export merged or as an
adapter that peft loads on top of the base model."""

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from ascent.cli import main
from ascent.trainer.rl.loop import train_rl
from tests.trainer.rl_setup import config

PROMPTS = ["say abcd", "say hhga"]


def greedy(model, tokenizer):
    """The greedy continuations of PROMPTS, as token ids."""
    outputs = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = model.generate(ids, do_sample=False, max_new_tokens=8, pad_token_id=0)
        outputs.append(out[0, ids.shape[1] :].tolist())
    return outputs


def load(directory):
    return AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).eval()


def same_weights(a, b):
    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return sorted(first) == sorted(second) and all(torch.equal(first[k], second[k]) for k in first)


def trained(tiny_model, prompts, run_dir, *overrides):
    """Two GRPO steps at a learning rate that moves the weights, exported by the run."""
    train_rl(
        config(
            tiny_model, prompts, run_dir, "trainer.total_steps=2", "trainer.export=true", *overrides
        )
    )
    return run_dir / "hf"


def test_export_is_the_trained_policy(tiny_model, prompts, tmp_path, capsys):
    live = trained(tiny_model, prompts, tmp_path / "run", "actor.optim.lr=1e-2")
    out = tmp_path / "exported"
    assert main(["export", str(tmp_path / "run"), str(out)]) == 0
    assert "step_00000002" in capsys.readouterr().out  # the newest checkpoint of the run
    assert same_weights(out, live)
    assert not same_weights(out, Path(tiny_model))  # it trained
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert greedy(load(out), tokenizer) == greedy(load(live), tokenizer)

    assert main(["export", str(tmp_path / "run"), str(tmp_path / "x"), "--lora", "adapter"]) == 2
    assert "not trained with LoRA" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nowhere"), str(tmp_path / "y")]) == 2
    assert "no such checkpoint directory" in capsys.readouterr().err


def test_lora_exports_merged_or_as_an_adapter(tiny_model, prompts, tmp_path):
    from peft import PeftModel

    lora = ["model.lora.rank=4", "actor.optim.lr=3e-2", "algorithm.kl.mode=none"]
    live = trained(tiny_model, prompts, tmp_path / "run", *lora)  # merged by the workers
    merged, adapter = tmp_path / "merged", tmp_path / "adapter"
    assert main(["export", str(tmp_path / "run"), str(merged)]) == 0
    assert main(["export", str(tmp_path / "run"), str(adapter), "--lora", "adapter"]) == 0
    assert same_weights(merged, live)
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 4
    assert not (adapter / "model.safetensors").exists()  # the adapter alone
    tokenizer = AutoTokenizer.from_pretrained(merged, local_files_only=True)
    on_base = PeftModel.from_pretrained(load(tiny_model), adapter).eval()
    expected = greedy(load(merged), tokenizer)
    assert greedy(on_base, tokenizer) == expected
    assert expected != greedy(load(tiny_model), tokenizer)  # the adapters changed the policy
