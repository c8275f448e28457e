"""Qwen2-VL and Qwen2.5-VL: a Qwen2 language model behind a vision tower.

The native engine runs the language model with Llama-style layers; what the family adds is
its prompts (``VisionPrompts``): images become features on the image tokens at prefill, and
every position rotates with multimodal RoPE (M-RoPE).

A prompt with images (a request's ``images``, data URLs in the order of its image tokens) is
prepared once (``PromptVision``): its pixel values and grids from the checkpoint's image
processor, and its M-RoPE position planes from the model's own ``get_rope_index``, (3, P),
with the shift ``delta = max(planes) + 1 - P``. Token i of the sequence then rotates with

    planes[:, i]                 for a prompt token (i < P)
    (i + delta, i + delta, i + delta)    for a generated token (i >= P)

(for text after the last image the three planes are equal, so a generated token's rotation
is plain RoPE at i + delta: the request's ``rope_shift``). The KV cache keeps positions as
token indices, so blocks, tables and the attention kernel are unchanged; only the rotation
differs.

At prefill, the rows' new tokens are embedded as text, and each image token's embedding is
replaced by its image's features from the vision tower (``get_image_features``, run on the
images whose tokens the chunk holds: a prompt prefilled in several chunks, or continuing
cached context such as an episode's next turn, runs the tower on its new images only). The
prefix cache tells prompts apart by their images as well as their tokens: the image tokens
are all the same id, so the cache names each by its image (``prefix_keys``).

The trainer's forward takes the same images and planes (``ascent.vision.forward``).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor, nn

from ascent.models.families.blocks import Rotations
from ascent.models.families.decoder import Decoder
from ascent.models.families.reading import pre_norm_decoder
from ascent.models.families.spec import ModelFamily, PreparedPrompt, PromptInputs, TrainingHooks
from ascent.vision.forward import VisionForwardInputs
from ascent.vision.processing import ImageInputs, VisionProcessor
from ascent.vision.prompts import expand_image_tokens, image_token_id


@dataclass(frozen=True)
class PromptVision(PreparedPrompt):
    """A prompt's images, prepared: ``inputs`` (pixel values and grids), ``planes`` (3, P)
    its M-RoPE positions, ``image_rows`` (P,) each prompt token's row among the image
    features (-1 for text); ``rope_shift`` is the delta after the prompt."""

    inputs: ImageInputs | None = None
    planes: Tensor | None = None
    image_rows: Tensor | None = None

    def rope_positions(self, start: int, stop: int) -> Tensor:
        """The three planes (3, stop - start) of token indices start..stop-1."""
        length = self.planes.shape[1]
        inside = self.planes[:, min(start, length) : min(stop, length)]
        after = torch.arange(max(start, length), stop) + self.rope_shift
        return torch.cat([inside, after.expand(3, -1)], dim=1)


class VisionPrompts(PromptInputs):
    """Prepares image prompts for ``model`` (a Qwen2-VL-style model whose checkpoint, with
    its image processor, is ``model_dir``) and puts their features into the prefill."""

    def __init__(self, model: nn.Module, model_dir: str | Path | None) -> None:
        super().__init__(model)
        if model_dir is None:
            raise ValueError("a vision-language model needs model_dir (its image processor)")
        self.model = model
        self.processor = VisionProcessor(model_dir)
        self.image_token_id = image_token_id(model.config)

    def prepare(self, prompt: list[int], images: Sequence[str], where: str) -> PreparedPrompt:
        """The prepared images of ``prompt``; ValueError naming ``where`` when its image
        tokens do not match the images (a prompt without images rotates as text)."""
        ids = torch.tensor([prompt])
        is_image = ids[0] == self.image_token_id
        inputs = self.processor(list(images)) if images else None
        merge = self.processor.merge_size**2
        expected = 0 if inputs is None else int(inputs.grid_thw.prod(-1).sum()) // merge
        if int(is_image.sum()) != expected:
            raise ValueError(
                f"{where} has {int(is_image.sum())} image tokens but its {len(images)} image(s) "
                f"take {expected}: render the prompt with the model's processor rules"
            )
        if inputs is None:
            return super().prepare(prompt, images, where)
        planes, delta = self.model.model.get_rope_index(
            ids, is_image.int()[None], image_grid_thw=inputs.grid_thw
        )
        rows = torch.full((len(prompt),), -1, dtype=torch.long)
        rows[is_image] = torch.arange(expected)
        return PromptVision(
            rope_shift=int(delta.reshape(-1)[0]),
            prefix_keys=image_keys(prompt, is_image, images, inputs, merge),
            inputs=inputs,
            planes=planes[:, 0],
            image_rows=rows,
        )

    def with_image_tokens(self, ids: list[int], images: Sequence[str]) -> list[int]:
        """BadImage for an image the processor refuses (an aspect ratio over 200), or when
        the prompt does not hold one image token per image."""
        counts = self.processor.token_counts(list(images))
        return expand_image_tokens(ids, self.image_token_id, counts)

    def embed(
        self,
        hidden: Tensor,
        positions: Tensor,
        prepared: Sequence[PreparedPrompt],
        lengths: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The chunk's embeddings with image features on the image tokens, and its rotary
        positions as three planes (3, P, T)."""
        if not any(isinstance(p, PromptVision) for p in prepared):
            return hidden, positions
        hidden = hidden.clone()
        planes = positions[None].expand(3, -1, -1).clone()
        length = positions.shape[1]
        for row, vision in enumerate(prepared):
            if not isinstance(vision, PromptVision):
                continue
            start = int(positions[row, 0])
            planes[:, row] = vision.rope_positions(start, start + length).to(planes.device)
            image_rows = vision.image_rows[start : start + int(lengths[row])]
            here = (image_rows >= 0).nonzero(as_tuple=True)[0]
            if here.numel():
                features = self.features(vision, image_rows[here], hidden.device)
                hidden[row, here.to(hidden.device)] = features.to(hidden.dtype)
        return hidden, planes

    def features(self, vision: PromptVision, rows: Tensor, device: torch.device) -> Tensor:
        """The features (len(rows), hidden) of a prompt's image tokens ``rows`` (indices
        among all its image tokens, ascending), from the vision tower run on the images they
        belong to only: a chunk that continues cached context (an episode's next turn) runs
        it on its new images, not on every image of the conversation again."""
        inputs, merge = vision.inputs, self.processor.merge_size**2
        patches = inputs.grid_thw.prod(-1)
        tokens = patches // merge
        token_ends = tokens.cumsum(0)
        owner = torch.searchsorted(token_ends, rows, right=True)  # each row's image
        images = torch.unique(owner)
        patch_ends = patches.cumsum(0)
        pixels = torch.cat(
            [inputs.pixel_values[patch_ends[i] - patches[i] : patch_ends[i]] for i in images]
        )
        out = self.model.model.get_image_features(
            pixels.to(device), inputs.grid_thw[images].to(device)
        )
        features = torch.cat(out.pooler_output, dim=0)
        # Where each image's tokens start among the features computed, and among all.
        starts_here = torch.cumsum(tokens[images], 0) - tokens[images]
        place = torch.zeros_like(tokens)
        place[images] = starts_here
        first = token_ends - tokens
        return features[(place[owner] + rows - first[owner]).to(features.device)]


def image_keys(
    prompt: list[int], is_image: Tensor, images: Sequence[str], inputs: ImageInputs, merge: int
) -> tuple[int, ...]:
    """``prompt`` with each image token replaced by a key of its image (a negative number,
    never a token id): the names the prefix cache gives the prompt's blocks."""
    keys = list(prompt)
    counts = (inputs.grid_thw.prod(-1) // merge).tolist()
    where = is_image.nonzero(as_tuple=True)[0].tolist()
    start = 0
    for url, count in zip(images, counts, strict=True):
        key = -1 - (hash(url) & (2**62 - 1))
        for position in where[start : start + count]:
            keys[position] = key
        start += count
    return tuple(keys)


def read(model: nn.Module) -> Decoder:
    decoder = pre_norm_decoder(model, model.model.language_model)
    return replace(decoder, rotary=three_planes(decoder.rotary))


def three_planes(rotary: Callable[[Tensor, Tensor], Rotations]) -> Callable:
    """M-RoPE over text positions (B, T) as three equal planes (3, B, T): transformers
    releases before 5.23 index the planes without expanding 2-D positions themselves."""

    def rotations(hidden: Tensor, positions: Tensor) -> Rotations:
        if positions.dim() == 2:
            positions = positions[None].expand(3, -1, -1)
        return rotary(hidden, positions)

    return rotations


FAMILY = ModelFamily(
    name="qwen_vl",
    model_types=("qwen2_vl", "qwen2_5_vl"),
    read=read,
    prompt_inputs=VisionPrompts,
    # Replayed steps would rotate every row as text: rows after images shift per request.
    cuda_graphs=False,
    training=TrainingHooks(extra_inputs=VisionForwardInputs),
)
