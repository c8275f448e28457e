"""SPPO end to end on the toy task: under a known preference rule (the response with the
larger share of digits is preferred; a tie is half a win), the trained policy's samples win
against the initial policy's on held-out prompts. The win rate is measured outside the
trainer: both checkpoints sample with transformers' ``generate`` and the rule compares them."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ascent.trainer.rl.loop import train_rl
from tests.rewards.scorers import digit_share
from tests.trainer.rl_setup import config

SAMPLES = 8  # per held-out prompt and policy


def preferred(a: str, b: str) -> float:
    """The rule: 1 if a has the larger digit share, 1/2 on a tie, else 0."""
    share_a, share_b = digit_share(None, a, None, None), digit_share(None, b, None, None)
    return 1.0 if share_a > share_b else 0.5 if share_a == share_b else 0.0


def samples(model_dir, tokenizer, prompts, seed):
    """SAMPLES responses to each prompt, in one batched ``generate`` (the toy prompts all
    have the same length, so no padding)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    ids = torch.tensor([tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts])
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            max_new_tokens=8,
            num_return_sequences=SAMPLES,
            pad_token_id=tokenizer.pad_token_id,
        )
    texts = tokenizer.batch_decode(out[:, ids.shape[1] :], skip_special_tokens=True)
    return [texts[i * SAMPLES : (i + 1) * SAMPLES] for i in range(len(prompts))]


def win_rate(trained, initial):
    """The mean of the rule over every (trained, initial) pair of samples of a prompt."""
    pairs = [preferred(a, b) for t, i in zip(trained, initial, strict=True) for a in t for b in i]
    return sum(pairs) / len(pairs)


@pytest.mark.learning
@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow)])
def test_sppo_wins_against_the_initial_policy(tiny_model, prompts, tmp_path, seed):
    result = train_rl(
        config(
            tiny_model,
            prompts,
            tmp_path,
            "algorithm.name=sppo",
            "algorithm.estimator_params.temperature=0",  # the rule itself: hard preferences
            "trainer.total_steps=20",
            "trainer.export=true",
            f"trainer.seed={seed}",
            f"data.seed={seed}",
        )
    )
    held_out = [json.loads(line)["prompt"] for line in (prompts / "val.jsonl").open()]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    trained = samples(result["export_dir"], tokenizer, held_out, seed)
    initial = samples(tiny_model, tokenizer, held_out, seed)
    rate, self_play = win_rate(trained, initial), win_rate(initial, initial)
    print(f"seed {seed}: win rate {rate:.3f} (initial against itself {self_play:.3f})")
    assert self_play == pytest.approx(0.5)  # the measure is fair: a policy ties itself
    assert rate > 0.75
