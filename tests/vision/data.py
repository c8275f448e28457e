"""Images and image-prompt RL batches for the vision tests, built through the data layer."""

import io

import numpy as np
import torch
from PIL import Image

from ascent.batch import Batch
from ascent.data.files import Row
from ascent.data.images import row_images_for
from ascent.data.rl import RLDataConfig, row_prompt
from ascent.models import load_tokenizer


def png_bytes(width: int, height: int, seed: int = 0, mode: str = "RGB") -> bytes:
    """A random-noise image encoded as PNG."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    image = Image.fromarray(pixels).convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def vision_rl_batch(
    model_dir: str, rows: int = 6, response_length: int = 5, seed: int = 0
) -> Batch:
    """Rows in the training layout whose prompts hold 0, 1 or 2 images of several sizes
    (every third row is text only), rendered by the RL data path; random responses of
    random lengths, left-padded prompts, right-padded responses, random advantages."""
    tokenizer = load_tokenizer(model_dir)
    images = row_images_for(model_dir)
    config = RLDataConfig(train_files=[])
    g = torch.Generator().manual_seed(seed)
    prompts, urls = [], []
    for i in range(rows):
        count = [1, 2, 0][i % 3]
        data = {
            "data_source": "test",
            "prompt": "look " + " and ".join(["<image>"] * count) + f" row {i}",
            "reward_model": {"ground_truth": "x"},
            "images": [
                {"bytes": png_bytes(28 + 14 * ((i + k) % 4), 56, seed * 100 + i * 10 + k)}
                for k in range(count)
            ],
        }
        prompt = row_prompt(Row(data, "mem.parquet", i), tokenizer, config, images=images)
        prompts.append(prompt.prompt_ids)
        urls.append(list(prompt.images))
    width = max(len(p) for p in prompts)
    prompt_ids = torch.full((rows, width), tokenizer.pad_token_id)
    prompt_mask = torch.zeros(rows, width, dtype=torch.long)
    responses = torch.zeros(rows, response_length, dtype=torch.long)
    response_mask = torch.zeros(rows, response_length, dtype=torch.long)
    lengths = torch.randint(1, response_length + 1, (rows,), generator=g)
    for i, ids in enumerate(prompts):
        prompt_ids[i, width - len(ids) :] = torch.tensor(ids)
        prompt_mask[i, width - len(ids) :] = 1
        responses[i, : lengths[i]] = torch.randint(1, 256, (int(lengths[i]),), generator=g)
        response_mask[i, : lengths[i]] = 1
    return Batch.from_dict(
        {
            "prompts": prompt_ids,
            "prompt_mask": prompt_mask,
            "responses": responses,
            "input_ids": torch.cat([prompt_ids, responses], dim=1),
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
            "response_mask": response_mask,
            "advantages": torch.randn(rows, response_length, generator=g) * response_mask,
            "uid": [f"p{i // 2}" for i in range(rows)],
            "images": urls,
        }
    )
