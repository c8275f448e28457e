"""The SFT trainer learns a synthetic task; the exported model, loaded with plain
transformers, generates the learned answers; a run resumes; one and two ranks agree."""

import json

import pytest
import torch
from examples.make_copy_data import copy_rows  # the task examples/sft_copy.yaml trains
from transformers import AutoModelForCausalLM, AutoTokenizer

from ascent.config import load_config
from ascent.trainer.sft import SFTConfig, train_sft


@pytest.fixture(scope="module")
def copy_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("copy")
    for name, count, seed in (("train", 2048, 0), ("val", 64, 1)):
        (folder / f"{name}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in copy_rows(count, seed))
        )
    return folder


def config(tiny_model, copy_data, run_dir, *overrides):
    return load_config(
        SFTConfig,
        None,
        [
            f"model.path={tiny_model}",
            f"data.train_files=[{copy_data / 'train.jsonl'}]",
            f"data.val_files=[{copy_data / 'val.jsonl'}]",
            "optim.lr=3e-3",
            "optim.warmup_steps=10",
            f"trainer.run_dir={run_dir}",
            "trainer.batch_size=32",
            "trainer.progress_bar=false",
            "tracking.sinks=[jsonl]",
            *overrides,
        ],
    )


@pytest.mark.learning
def test_sft_learns_and_the_export_generates_the_answers(tiny_model, copy_data, tmp_path):
    result = train_sft(
        config(tiny_model, copy_data, tmp_path / "run", "trainer.epochs=4", "trainer.val_every=64")
    )
    first, last = result["val_loss"][0][1], result["val_loss"][-1][1]
    assert last < 0.1 * first, result["val_loss"]

    model = AutoModelForCausalLM.from_pretrained(result["export_dir"])
    tokenizer = AutoTokenizer.from_pretrained(result["export_dir"])
    correct = 0
    held_out = copy_rows(20, seed=99)
    for row in held_out:
        inputs = tokenizer.apply_chat_template(
            row["messages"][:1], add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        out = model.generate(
            **inputs,
            max_new_tokens=8,
            do_sample=False,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        answer = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        correct += answer == row["messages"][1]["content"]
    assert correct >= 16, f"{correct}/20 held-out words copied"


def test_a_stopped_run_resumes_from_its_checkpoint(tiny_model, copy_data, tmp_path, capsys):
    run = tmp_path / "run"
    first = train_sft(
        config(
            tiny_model,
            copy_data,
            run,
            "trainer.max_steps=4",
            "trainer.val_every=0",
            "trainer.export=false",
        )
    )
    assert first["steps"] == 4 and (run / "checkpoints" / "step_00000004").is_dir()
    second = train_sft(
        config(
            tiny_model,
            copy_data,
            run,
            "trainer.max_steps=6",
            "trainer.val_every=0",
            "trainer.export=false",
        )
    )
    assert "resumed from" in capsys.readouterr().out
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6], "steps 5 and 6 continue the first run, nothing repeated"
    assert second["steps"] == 6


@pytest.mark.integration
@pytest.mark.slow
def test_one_and_two_ranks_give_the_same_loss_curve(tiny_model, copy_data, tmp_path, local_ray):
    common = (
        "trainer.max_steps=5",
        "trainer.val_every=5",
        "trainer.export=false",
        "trainer.tokens_per_micro_batch=300",
    )
    one = train_sft(config(tiny_model, copy_data, tmp_path / "one", *common))
    two = train_sft(
        config(tiny_model, copy_data, tmp_path / "two", *common, "resources.devices_per_node=2")
    )

    def curve(run):
        return [
            json.loads(line)["sft/loss"]
            for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()
            if "sft/loss" in line
        ]

    torch.testing.assert_close(
        torch.tensor(curve("two")), torch.tensor(curve("one")), rtol=1e-4, atol=1e-5
    )
    assert one["val_loss"][-1][1] == pytest.approx(two["val_loss"][-1][1], rel=1e-4)


def test_lora_sft_lowers_the_loss_and_exports_merged_weights(tiny_model, copy_data, tmp_path):
    result = train_sft(
        config(
            tiny_model,
            copy_data,
            tmp_path / "lora",
            "model.lora={rank: 8, alpha: 16}",
            "optim.lr=1e-2",
            "trainer.max_steps=12",
            "trainer.val_every=12",
        )
    )
    # A random tiny model's frozen output head has rows of norm ~0.16: adapters alone can
    # raise a token's logit by little more than 1, so the loss falls from ln(259) = 5.56 to
    # about 5; full fine-tuning (test above) goes much further.
    assert result["val_loss"][-1][1] < result["val_loss"][0][1] - 0.2
    exported = AutoModelForCausalLM.from_pretrained(result["export_dir"]).state_dict()
    base = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    assert exported.keys() == base.keys(), "a plain checkpoint: adapters merged, no lora_ names"
    assert not torch.equal(
        exported["model.layers.0.self_attn.q_proj.weight"],
        base["model.layers.0.self_attn.q_proj.weight"],
    )
    assert torch.equal(exported["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
