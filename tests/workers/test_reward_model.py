"""The reward-model role scores exactly what transformers scores for the same conversation,
across micro-batches and truncation; Bradley-Terry training with LoRA trains the adapters
and the score head, and its export loads in transformers with the same scores."""

import pytest
import torch
from examples.make_preference_data import preference_rows
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from ascent.batch import Batch
from ascent.controller import WorkerError
from ascent.data.preference import PreferencePair, reward_model_ids
from ascent.models.loading import load_sequence_classifier
from ascent.workers.reward_model import RewardModelWorker
from ascent.workers.reward_trainer import RewardTrainerWorker, collate_pairs
from tests.workers.conftest import in_process

CONVERSATIONS = [
    [{"role": "user", "content": "say abcd"}, {"role": "assistant", "content": text}]
    for text in ("1234", "hello there", "", "9" * 40, "a1")
]


@pytest.fixture(scope="module")
def reward_checkpoint(tiny_model, tmp_path_factory):
    """A sequence classifier from the tiny causal LM, its random head saved with it."""
    folder = tmp_path_factory.mktemp("rm")
    torch.manual_seed(0)
    model = load_sequence_classifier(tiny_model, pad_token_id=None)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(folder)
    return str(folder)


def transformers_score(model, tokenizer, messages, max_length=10_000):
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return float(model(input_ids=ids[:, -max_length:]).logits[0, 0])


@pytest.mark.parametrize("budget", [8192, 40])  # 40 tokens: a micro-batch per row or two
def test_scores_equal_transformers_one_conversation_at_a_time(reward_checkpoint, budget):
    worker = in_process(
        RewardModelWorker,
        {"model": {"path": reward_checkpoint}, "tokens_per_micro_batch": budget, "max_length": 48},
    )
    try:
        out = worker.score(Batch.from_dict({"rm_messages": CONVERSATIONS}))
    finally:
        worker.shutdown()
    model = AutoModelForSequenceClassification.from_pretrained(reward_checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(reward_checkpoint)
    expected = [transformers_score(model, tokenizer, c, max_length=48) for c in CONVERSATIONS]
    assert out["rm_scores"].tolist() == pytest.approx(expected, abs=1e-5)
    assert out["rm_truncated"].tolist() == [0, 0, 0, 1, 0]  # 40 nines and the template > 48
    assert len(set(expected)) == len(expected)  # the rows really differ


def test_a_conversation_that_ends_with_the_pad_token_is_refused(reward_checkpoint):
    """Without a template the tiny tokenizer renders "<|endoftext|>" as its pad token, last:
    transformers would read that score one token early."""
    worker = in_process(
        RewardModelWorker, {"model": {"path": reward_checkpoint}, "chat_template": False}
    )
    ends_with_pad = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "<|endoftext|>"},
    ]
    try:
        with pytest.raises(WorkerError, match=r"ValueError: .*ends with its pad token"):
            worker.score(Batch.from_dict({"rm_messages": [CONVERSATIONS[0], ends_with_pad]}))
    finally:
        worker.shutdown()


def test_lora_reward_training_moves_adapters_and_head_and_exports(tiny_model, tmp_path):
    """A few Bradley-Terry steps with LoRA: the accuracy on held-out pairs rises, the base
    weights stay, and the merged export (adapters and the trained head) scores in transformers
    as the reward-model role does."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)

    def pairs(count, seed):
        out = []
        for row in preference_rows(count, seed):
            prompt = [{"role": "user", "content": row["prompt"]}]
            sides = [
                reward_model_ids(
                    tokenizer,
                    [*prompt, {"role": "assistant", "content": row[key]}],
                    chat_template=True,
                    max_length=64,
                )[0]
                for key in ("chosen", "rejected")
            ]
            out.append(PreferencePair(*sides))
        return collate_pairs(out)

    config = {
        "model": {"path": tiny_model, "lora": {"rank": 8, "alpha": 16}},
        "optim": {"lr": 1e-2},
    }
    worker = in_process(RewardTrainerWorker, config)
    held_out = pairs(128, seed=1)
    try:
        before = worker.eval_sums(held_out)[0]
        for step in range(40):
            worker.train_step(pairs(32, seed=100 + step))
        after = worker.eval_sums(held_out)[0]
        worker.export(str(tmp_path / "hf"))
    finally:
        worker.shutdown()
    assert after["correct"] / after["pairs"] > before["correct"] / before["pairs"] + 0.15, (
        before,
        after,
    )
    exported = AutoModelForSequenceClassification.from_pretrained(tmp_path / "hf").eval()
    base = AutoModelForSequenceClassification.from_pretrained(tiny_model, num_labels=1)
    assert not torch.equal(
        exported.model.layers[0].mlp.up_proj.weight, base.model.layers[0].mlp.up_proj.weight
    )  # adapters merged
    scorer = in_process(RewardModelWorker, {"model": {"path": str(tmp_path / "hf")}})
    try:
        role = scorer.score(Batch.from_dict({"rm_messages": CONVERSATIONS}))["rm_scores"]
    finally:
        scorer.shutdown()
    expected = [transformers_score(exported, tokenizer, c) for c in CONVERSATIONS]
    assert role.tolist() == pytest.approx(expected, abs=1e-5)
