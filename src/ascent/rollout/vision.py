"""The native engine's vision piece: image features at prefill, multimodal RoPE throughout.

A prompt with images (a request's ``images``, data URLs in the order of its image tokens)
is prepared once (``PromptVision``): its pixel values and grids from the checkpoint's image
processor, and its M-RoPE position planes from the model's own ``get_rope_index``, (3, P),
with the shift ``delta = max(planes) + 1 - P``. Token i of the sequence then rotates with

    planes[:, i]                 for a prompt token (i < P)
    (i + delta, i + delta, i + delta)    for a generated token (i >= P)

(for text after the last image the three planes are equal, so a generated token's rotation
is plain RoPE at i + delta). The KV cache keeps positions as token indices, so blocks,
tables and the attention kernel are unchanged; only the rotation differs.

At prefill, the rows' new tokens are embedded as text, and each image token's embedding is
replaced by its image's features from the vision tower (``get_image_features``, run on the
whole prompt's images: a prompt prefilled in several chunks takes the slice each chunk
covers). The prefix cache tells prompts apart by their images as well as their tokens: the
image tokens are all the same id.
"""

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ascent.vision.processing import ImageInputs, VisionProcessor
from ascent.vision.prompts import image_token_id


@dataclass(frozen=True)
class PromptVision:
    """A prompt's images, prepared: ``inputs`` (pixel values and grids), ``planes`` (3, P)
    its M-RoPE positions, ``delta`` the shift of every position after it, and ``image_rows``
    (P,) each prompt token's row among the image features (-1 for text)."""

    inputs: ImageInputs
    planes: Tensor
    delta: int
    image_rows: Tensor

    def rope_positions(self, start: int, stop: int) -> Tensor:
        """The three planes (3, stop - start) of token indices start..stop-1."""
        length = self.planes.shape[1]
        inside = self.planes[:, min(start, length) : min(stop, length)]
        after = torch.arange(max(start, length), stop) + self.delta
        return torch.cat([inside, after.expand(3, -1)], dim=1)


class VisionPrefill:
    """Prepares image prompts for ``model`` (a transformers vision-language model whose
    checkpoint, with its image processor, is ``model_dir``) and computes their features."""

    def __init__(self, model: nn.Module, model_dir: str | Path) -> None:
        self.model = model
        self.processor = VisionProcessor(model_dir)
        self.image_token_id = image_token_id(model.config)

    def prepare(self, prompt: list[int], images: list[str], where: str) -> PromptVision:
        """The prepared images of ``prompt``; ValueError naming ``where`` when its image
        tokens do not match the images."""
        inputs = self.processor(images)
        ids = torch.tensor([prompt])
        is_image = ids[0] == self.image_token_id
        expected = int(inputs.grid_thw.prod(-1).sum()) // self.processor.merge_size**2
        if int(is_image.sum()) != expected:
            raise ValueError(
                f"{where} has {int(is_image.sum())} image tokens but its {len(images)} image(s) "
                f"take {expected}: render the prompt with the model's processor rules"
            )
        planes, delta = self.model.model.get_rope_index(
            ids, is_image.int()[None], image_grid_thw=inputs.grid_thw
        )
        rows = torch.full((len(prompt),), -1, dtype=torch.long)
        rows[is_image] = torch.arange(expected)
        return PromptVision(inputs, planes[:, 0], int(delta.reshape(-1)[0]), rows)

    def features(self, vision: PromptVision, device: torch.device, dtype: torch.dtype) -> Tensor:
        """The image features (image tokens, hidden) of a prompt, in token order."""
        inputs = vision.inputs
        pixels = inputs.pixel_values.to(device)
        out = self.model.model.get_image_features(pixels, inputs.grid_thw.to(device))
        return torch.cat(out.pooler_output, dim=0).to(dtype)
