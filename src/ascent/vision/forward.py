"""The inputs a vision-language model's forward takes beyond token ids, for training layouts.

For rows whose prompts hold images (batch field ``images``: per row, its data URLs in order):

- ``pixel_values`` (P, C·T·p·p) and ``image_grid_thw`` (I, 3): every image of the rows, in
  row order, which is also the order of the image tokens in the packed or padded ids, so the
  model's own ``masked_scatter`` puts each image's features on its tokens;
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
        """Forward kwargs for rows ``input_ids``/``attention_mask`` (B, L) whose images are
        ``images`` (B lists), laid out as ``layout`` (a ``PackedSequences`` of those rows)."""
        inputs = ImageInputs.concat([self.processor(urls or []) for urls in images])
        grid = None if inputs is None else inputs.grid_thw
        planes = self.positions(input_ids, attention_mask, grid)
        laid_out = layout.lay_out(planes.to(device))
        if layout.attention_mask is None:  # packed: the restarting per-row plane goes first
            laid_out = torch.cat([layout.position_ids[None], laid_out], dim=0)
        extra = {"position_ids": laid_out}
        if inputs is not None:
            extra["pixel_values"] = inputs.pixel_values.to(device)
            extra["image_grid_thw"] = inputs.grid_thw.to(device)
        return extra

    def keep_in_step(
        self, model: nn.Module, inputs: dict[str, Tensor], device: torch.device
    ) -> Tensor | None:
        """When these rows have no image: the vision tower run on one blank image, as a zero
        to add to the model's output (None when they have images). Under FSDP every sharded
        vision block gathers its weights in its forward and reduces its gradients in the
        backward, so a rank whose micro-batch holds only text must still run them, and in
        the same order as the others (before the language model: call this first)."""
        if "pixel_values" in inputs:
            return None
        tower = vision_tower(model)
        blank = torch.zeros(4, self.processor.patch_values, dtype=tower.dtype)
        grid = torch.tensor([[1, 2, 2]])  # one merged token
        features = tower(blank.to(device), grid_thw=grid.to(device)).pooler_output
        return 0.0 * features.sum()

    def positions(
        self, input_ids: Tensor, attention_mask: Tensor, grid_thw: Tensor | None
    ) -> Tensor:
        """The three M-RoPE planes (3, B, L) of the rows (0 at padding)."""
        token_types = (input_ids == self.image_token_id).int() * attention_mask.int()
        planes, _ = self.rope_model.get_rope_index(
            input_ids.cpu(),
            token_types.cpu(),
            image_grid_thw=None if grid_thw is None else grid_thw.cpu(),
            attention_mask=attention_mask.cpu(),
        )
        return planes
