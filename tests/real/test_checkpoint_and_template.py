"""The converted SmolLM2 is the GGUF's model, loads through ascent's own path with its head
tied to its embedding, and its chat template's default system prompt reaches every RL
prompt and SFT example the way the tokenizer's own ``apply_chat_template`` renders it."""

import json

import pytest
import torch
from safetensors.torch import load_file

from ascent.cli import main
from ascent.data.rl import RLDataConfig, load_rl_prompts
from ascent.data.sft import chat_example
from ascent.models import load_causal_lm, load_tokenizer
from ascent.models.gguf import packaged_gguf
from ascent.rollout import EngineLimits, NativeEngine, SamplingParams

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def test_the_checkpoint_is_a_tied_llama_that_knows_paris(smollm2):
    model = load_causal_lm(smollm2)
    tokenizer = load_tokenizer(smollm2)
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.num_hidden_layers == 30
    assert model.config.tie_word_embeddings
    assert model.lm_head.weight is model.get_input_embeddings().weight
    assert set(load_file(f"{smollm2}/model.safetensors")) == {
        name for name, _ in model.named_parameters()
    }  # the tied head is stored once
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
    )
    ids = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    engine = NativeEngine(
        model, EngineLimits(max_num_seqs=1, max_model_len=128), tokenizer=tokenizer
    )
    [answer] = engine.generate(
        [ids],
        SamplingParams(temperature=0, max_new_tokens=12, stop_token_ids=[tokenizer.eos_token_id]),
    )
    assert "Paris" in tokenizer.decode(answer.token_ids)


@pytest.mark.slow
def test_convert_gguf_writes_a_checkpoint_from_a_gguf_path(smollm2, tmp_path, capsys):
    out = tmp_path / "converted"
    assert main(["convert-gguf", str(packaged_gguf("smollm2")), str(out)]) == 0
    converted, cached = (
        load_file(out / "model.safetensors"),
        load_file(f"{smollm2}/model.safetensors"),
    )
    assert sorted(converted) == sorted(cached)
    assert all(torch.equal(converted[name], cached[name]) for name in cached)
    assert (out / "tokenizer.json").is_file() and (out / "chat_template.jinja").is_file()
    assert oct((out).stat().st_mode & 0o777) == oct(0o755)
    capsys.readouterr()
    assert main(["convert-gguf", "smollm2", str(out)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert main(["convert-gguf", str(tmp_path / "missing.gguf"), str(tmp_path / "x")]) == 2
    assert "no GGUF file at" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_rl_prompts_carry_the_templates_default_system_prompt(smollm2, tmp_path):
    tokenizer = load_tokenizer(smollm2)
    rows = [
        {
            "prompt": [{"role": "user", "content": "What is 2 + 3?"}],
            "reward_model": {"ground_truth": "5"},
        },
        {
            "prompt": [
                {"role": "system", "content": "You add numbers."},
                {"role": "user", "content": "What is 2 + 3?"},
            ],
            "reward_model": {"ground_truth": "5"},
        },
    ]
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"data_source": "arithmetic", **r}) + "\n" for r in rows))
    prompts, counts = load_rl_prompts([str(path)], tokenizer, RLDataConfig(train_files=[]))
    assert counts["kept"] == 2
    default, own = (tokenizer.decode(p.prompt_ids) for p in prompts)
    assert default == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert DEFAULT_SYSTEM not in own and own.startswith("<|im_start|>system\nYou add numbers.")
    for prompt, row in zip(prompts, rows, strict=True):
        rendered = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True)
        assert prompt.prompt_ids == list(
            rendered["input_ids"] if hasattr(rendered, "keys") else rendered
        )


def test_sft_trains_exactly_the_assistant_turns_of_the_real_template(smollm2):
    tokenizer = load_tokenizer(smollm2)
    conversation = [
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "5"},
        {"role": "user", "content": "And 4 + 4?"},
        {"role": "assistant", "content": "It is 8."},
    ]
    example = chat_example(tokenizer, conversation)
    text = tokenizer.decode(example.input_ids)
    assert text.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>")
    trained = [t for t, m in zip(example.input_ids, example.loss_mask, strict=True) if m]
    # Each answer, its end-of-turn token and the newline the template writes after it.
    assert tokenizer.decode(trained) == "5<|im_end|>\nIt is 8.<|im_end|>\n"
