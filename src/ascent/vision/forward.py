"""The inputs a vision-language model's forward takes beyond token ids, for training layouts.

For rows whose prompts hold images (batch field ``images``: per row, its data URLs in order):

- ``pixel_values`` (P, C·T·p·p) and ``image_grid_thw`` (I, 3): every image of the rows, in
  row order, which is also the order of the image tokens in the packed or padded ids; the
  vision tower's features go onto those tokens (``embed``: each row's first image tokens,
  as many as its images take, so an image token id the model sampled stays text);
- ``position_ids``: multimodal RoPE. The model's own ``get_rope_index`` gives three planes
  (temporal, height, width), (3, B, L), per row: text tokens count up in all three planes;
  an image's tokens share its start position t0 in the temporal plane and take t0 + row,
  t0 + column of their merged patch in the other two; the text after an image continues at
  t0 + max(h, w) / merge. Laid out like the ids (``PackedSequences.lay_out``): padded rows
  take the planes as (3, B, L'); packed rows take (4, 1, N), the first plane the plain
  per-row positions that restart at 0 (transformers finds the row boundaries for its
  attention from that plane and rotates with the other three).

Without these explicit planes the model would fall back to 1-D positions, silently.
"""

from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ascent.vision.processing import ImageInputs, VisionProcessor
from ascent.vision.prompts import image_token_id, vision_tower


class VisionForwardInputs:
    """Builds the extra forward inputs for one vision-language model (``model``: the
    transformers model, e.g. a ``Qwen2_5_VLForConditionalGeneration``; ``model_dir``: its
    checkpoint, for the image processor)."""

    def __init__(self, model: nn.Module, model_dir: str | Path) -> None:
        self.processor = VisionProcessor(model_dir)
        self.rope_model = model.base_model  # owns get_rope_index (reads only its config)
        self.image_token_id = image_token_id(model.config)

    def __call__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor,
        images: list[list[str]],
        layout: Any,
        device: torch.device,
    ) -> dict[str, Tensor]:
        """What ``embed`` and the model's forward take for rows ``input_ids`` /
        ``attention_mask`` (B, L) whose images are ``images`` (B lists), laid out as
        ``layout`` (a ``PackedSequences`` of those rows): ``position_ids`` (the M-RoPE
        planes), and for rows with images ``pixel_values``, ``image_grid_thw`` and
        ``image_mask`` (where the image features go, laid out like the ids)."""
        parts = [self.processor(urls or []) for urls in images]
        inputs = ImageInputs.concat(parts)
        merge = self.processor.merge_size**2
        counts = torch.tensor([int(p.grid_thw.prod(-1).sum()) // merge for p in parts])
        is_image = self.image_tokens(input_ids.cpu(), attention_mask.cpu(), counts)
        grid = None if inputs is None else inputs.grid_thw
        planes = self.positions(input_ids, attention_mask, is_image, grid)
        laid_out = layout.lay_out(planes.to(device))
        if layout.attention_mask is None:  # packed: the restarting per-row plane goes first
            laid_out = torch.cat([layout.position_ids[None], laid_out], dim=0)
        extra = {"position_ids": laid_out}
        if inputs is not None:
            extra["pixel_values"] = inputs.pixel_values.to(device)
            extra["image_grid_thw"] = inputs.grid_thw.to(device)
            extra["image_mask"] = layout.lay_out(is_image.to(device))
        return extra

    def image_tokens(self, input_ids: Tensor, attention_mask: Tensor, counts: Tensor) -> Tensor:
        """(B, L) bool: the tokens that carry image features, the first ``counts[b]`` image
        tokens of row b. A response may hold the image token id too (a model can sample any
        id); there it is text, as in the rollout engine."""
        candidates = (input_ids == self.image_token_id) & attention_mask.bool()
        return candidates & (candidates.long().cumsum(-1) <= counts[:, None])

    def embed(self, model: nn.Module, input_ids: Tensor, inputs: dict[str, Tensor]) -> dict:
        """The language model's input embeddings: the ids' text embeddings with each image's
        features on its tokens (``image_mask``), from the vision tower run here, before the
        language model. Rows without images still run the tower on one blank image, its
        features added times zero: under FSDP every sharded vision block gathers its weights
        in its forward and reduces its gradients in the backward, so a rank whose
        micro-batch holds only text must run them too, in the same order as the others.
        Returns the forward's kwargs with ``inputs_embeds`` in place of the image inputs."""
        inputs = dict(inputs)
        embeds = model.get_input_embeddings()(input_ids)
        pixels, grid = inputs.pop("pixel_values", None), inputs.pop("image_grid_thw", None)
        mask = inputs.pop("image_mask", None)
        tower = vision_tower(model)
        if pixels is None:
            pixels = torch.zeros(4, self.processor.patch_values, device=input_ids.device)
            grid = torch.tensor([[1, 2, 2]], device=input_ids.device)  # one merged token
        features = tower(pixels.to(tower.dtype), grid_thw=grid).pooler_output.to(embeds.dtype)
        if mask is None:
            embeds = embeds + 0.0 * features.sum()
        else:
            embeds = embeds.masked_scatter(mask[..., None], features)
        return {**inputs, "inputs_embeds": embeds}

    def positions(
        self, input_ids: Tensor, attention_mask: Tensor, is_image: Tensor, grid: Tensor | None
    ) -> Tensor:
        """The three M-RoPE planes (3, B, L) of the rows (0 at padding), from the model's
        own ``get_rope_index`` with ``is_image`` as the image token type."""
        planes, _ = self.rope_model.get_rope_index(
            input_ids.cpu(),
            is_image.int(),
            image_grid_thw=None if grid is None else grid.cpu(),
            attention_mask=attention_mask.cpu(),
        )
        return planes
