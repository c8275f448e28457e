"""A scored-batch builder for the reward tests: responses as token ids, one row each."""

import torch

from ascent.batch import Batch


def scored_batch(tokenizer, truths, responses=None):
    responses = responses or ["abc"] * len(truths)
    ids = [tokenizer(r, add_special_tokens=False)["input_ids"] for r in responses]
    width = max(len(i) for i in ids) + 2
    tokens = torch.zeros(len(ids), width, dtype=torch.long)
    mask = torch.zeros(len(ids), width, dtype=torch.long)
    for row, seq in enumerate(ids):
        tokens[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    prompts = torch.ones(len(ids), 3, dtype=torch.long)
    return Batch.from_dict(
        {
            "responses": tokens,
            "attention_mask": torch.cat([torch.ones_like(prompts), mask], dim=1),
            "data_source": ["test"] * len(ids),
            "ground_truth": truths,
            "extra_info": [{}] * len(ids),
        }
    )
