"""From checked images (data URLs) to what a vision-language model takes: patches and grids.

The image processor is the checkpoint's own (``preprocessor_config.json`` next to the
weights), loaded with transformers' PIL backend so that the same pixels come out wherever
it runs (the torchvision backend resizes with other kernels). For Qwen2-VL and Qwen2.5-VL an
image of h x w pixels is resized (aspect kept) to H x W, multiples of patch x merge within
the processor's min..max pixels, and cut into (H/p)(W/p) patches of C·T·p·p values (T: the
temporal patch, an image repeated T times); the language model sees one token per
merge x merge patches:

    grid_thw = (1, H/p, W/p)        tokens = (H/p)(W/p) / merge²

Processing is deterministic, so rows carry only the data URL and each consumer (the
trainer's forwards, the native engine) processes it again; ``VisionProcessor`` keeps the
last images it processed.
"""

import shutil
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ascent.vision.images import BadImage, decode_url

# What a vision-language checkpoint keeps beside its weights, config and tokenizer: copied
# wherever ascent writes a checkpoint (exports, the files a training checkpoint carries).
PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "chat_template.json",
    "chat_template.jinja",
)


def copy_processor_files(source: str | Path, target: str | Path) -> None:
    """The processor files of the checkpoint at ``source`` (those it has) into ``target``."""
    for name in PROCESSOR_FILES:
        path = Path(source) / name
        if path.is_file():
            shutil.copy(path, Path(target) / name)


@dataclass(frozen=True)
class ImageInputs:
    """The vision inputs of some images, in order: ``pixel_values`` (P, C·T·p·p) float32, the
    patches of all images end to end, and ``grid_thw`` (I, 3) int64, each image's patch grid
    (P = Σ t·h·w)."""

    pixel_values: Tensor
    grid_thw: Tensor

    @staticmethod
    def concat(parts: "list[ImageInputs]") -> "ImageInputs | None":
        """The inputs of several rows' images, in row order (None when there are none)."""
        parts = [part for part in parts if part.grid_thw.shape[0]]
        if not parts:
            return None
        return ImageInputs(
            torch.cat([p.pixel_values for p in parts]), torch.cat([p.grid_thw for p in parts])
        )


class VisionProcessor:
    """The checkpoint's image processor, with a cache of the last ``cache_size`` images."""

    def __init__(self, model_dir: str | Path, cache_size: int = 256) -> None:
        from transformers import AutoImageProcessor

        self.processor = AutoImageProcessor.from_pretrained(
            Path(model_dir), backend="pil", local_files_only=True
        )
        self.merge_size = int(self.processor.merge_size)
        self.cache_size = cache_size
        self._cache: OrderedDict[str, ImageInputs] = OrderedDict()

    def __call__(self, urls: list[str]) -> ImageInputs:
        """The inputs of ``urls`` (data URLs from ``ascent.vision.images``), in order."""
        parts = [self._one(url) for url in urls]
        if not parts:
            return ImageInputs(
                torch.zeros(0, self.patch_values), torch.zeros(0, 3, dtype=torch.long)
            )
        return ImageInputs.concat(parts)

    @property
    def patch_values(self) -> int:
        """C·T·p·p: the length of one patch's row of ``pixel_values``."""
        p = self.processor
        return 3 * int(p.temporal_patch_size) * int(p.patch_size) ** 2

    def token_counts(self, urls: list[str]) -> list[int]:
        """Tokens each image takes in the language model's sequence."""
        merge = self.merge_size**2
        return [int(self._one(url).grid_thw.prod()) // merge for url in urls]

    def _one(self, url: str) -> ImageInputs:
        cached = self._cache.get(url)
        if cached is not None:
            self._cache.move_to_end(url)
            return cached
        try:
            out = self.processor(images=[decode_url(url)], return_tensors="pt")
        except ValueError as error:  # e.g. an aspect ratio over 200, which it cannot resize
            raise BadImage(f"the image processor refuses the image: {error}") from None
        inputs = ImageInputs(out["pixel_values"].float(), out["image_grid_thw"].long())
        self._cache[url] = inputs
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return inputs
