"""Synthetic RL batches in the training layout, for the engine and worker tests."""

import torch

from ascent.batch import Batch


def rl_batch(
    rows: int = 8,
    prompt_length: int = 6,
    response_length: int = 5,
    vocab: int = 256,
    seed: int = 0,
    samples_per_prompt: int = 2,
) -> Batch:
    """Left-padded prompts and right-padded responses of random lengths, a response mask
    with an interior hole (a tool span) in some rows, random advantages and returns."""
    g = torch.Generator().manual_seed(seed)
    prompt_lengths = torch.randint(2, prompt_length + 1, (rows,), generator=g)
    response_lengths = torch.randint(1, response_length + 1, (rows,), generator=g)
    prompts = torch.zeros(rows, prompt_length, dtype=torch.long)
    responses = torch.zeros(rows, response_length, dtype=torch.long)
    prompt_mask = torch.zeros(rows, prompt_length, dtype=torch.long)
    response_mask = torch.zeros(rows, response_length, dtype=torch.long)
    for i in range(rows):
        p, r = int(prompt_lengths[i]), int(response_lengths[i])
        prompts[i, prompt_length - p :] = torch.randint(1, vocab, (p,), generator=g)
        prompt_mask[i, prompt_length - p :] = 1
        responses[i, :r] = torch.randint(1, vocab, (r,), generator=g)
        response_mask[i, :r] = 1
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    loss_mask = response_mask.clone()
    if response_length >= 4:
        loss_mask[0, 1:3] = 0  # a tool span inside row 0's response: no loss, still attended
    return Batch.from_dict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "response_mask": loss_mask,
            "advantages": torch.randn(rows, response_length, generator=g) * loss_mask,
            "returns": torch.randn(rows, response_length, generator=g) * loss_mask,
            "uid": [f"p{i // samples_per_prompt}" for i in range(rows)],
        }
    )
