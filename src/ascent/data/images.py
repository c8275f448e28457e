"""A row's images, for a vision-language model: checked, and turned into the image tokens of
its rendered conversation (see ``ascent.vision``).

verl's multimodal schema: an ``images`` column holding, per row, a list of images (encoded
bytes, ``{"bytes", "path"}`` dicts, paths relative to the data file, or data URLs), and the
prompt text marking the k-th image's place with ``<image>``. A row with an image that breaks
a rule of ``ascent.vision.images`` (undecodable, empty, over ``max_image_pixels``) or whose
placeholders do not match its images is a MalformedRow that names the row and the image.
"""

from pathlib import Path
from typing import Any

from ascent.data.files import MalformedRow, Row
from ascent.errors import InputError
from ascent.vision.images import DEFAULT_MAX_PIXELS, BadImage, image_url
from ascent.vision.processing import VisionProcessor
from ascent.vision.prompts import (
    image_repeats,
    image_token_id,
    is_vision_language,
    repeat_per_token,
    with_image_parts,
)

IMAGES_HELP = (
    "Field with each row's images (a list: bytes, {'bytes','path'} dicts, paths or data URLs), "
    "whose places the prompt marks with <image> (vision-language models)."
)
MAX_PIXELS_HELP = (
    "Images with more pixels are malformed rows (decoding alone would take 3 bytes a pixel); "
    "smaller ones are resized by the model's image processor."
)


def row_images_for(
    model_dir: str | Path, max_pixels: int = DEFAULT_MAX_PIXELS, trust_remote_code: bool = False
) -> "RowImages | None":
    """How rows' images reach the model at ``model_dir``; None for a text-only model."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        Path(model_dir), trust_remote_code=trust_remote_code, local_files_only=True
    )
    return RowImages(model_dir, config, max_pixels) if is_vision_language(config) else None


class RowImages:
    """How the rows' images reach a vision-language model at ``model_dir``: its image
    processor (how many tokens an image takes) and its image token."""

    def __init__(
        self, model_dir: str | Path, config: Any, max_pixels: int = DEFAULT_MAX_PIXELS
    ) -> None:
        self.processor = VisionProcessor(model_dir)
        self.image_token_id = image_token_id(config)
        self.max_pixels = max_pixels

    def urls(self, value: Any, field: str, source: str) -> list[str]:
        """The checked data URLs of a row's ``images`` value; MalformedRow naming
        ``field[k]`` otherwise. Relative paths are read from ``source``'s directory."""
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            value = [value]
        urls = []
        for index, image in enumerate(value):
            try:
                url = image_url(image, base_dir=Path(source).parent, max_pixels=self.max_pixels)
                self.processor.token_counts([url])  # the processor's own rules (aspect ratio)
            except BadImage as error:
                raise MalformedRow(f"{field}[{index}]: {error}") from None
            urls.append(url)
        return urls

    def tokens(self, ids: list[int], urls: list[str]) -> list[int]:
        """The rendered ids with each image token repeated as often as its image needs."""
        return repeat_per_token(ids, self.repeats(ids, urls))

    def repeats(self, ids: list[int], urls: list[str]) -> list[int]:
        """How often each rendered token appears once the image tokens are expanded
        (``ascent.vision.prompts.image_repeats``); MalformedRow on a count mismatch."""
        try:
            return image_repeats(ids, self.image_token_id, self.processor.token_counts(urls))
        except BadImage as error:
            raise MalformedRow(str(error)) from None


def image_messages(messages: list[dict], urls: list[str]) -> list[dict]:
    """The conversation with ``<image>`` placeholders as image parts; MalformedRow when it
    marks a different number of images than the row has."""
    converted, count = with_image_parts(messages)
    if count != len(urls):
        raise MalformedRow(
            f"the prompt marks {count} image(s) (<image> or image parts) but the row has "
            f"{len(urls)}: mark each image's place once"
        )
    return converted


def row_image_urls(row: Row, field: str, images: RowImages | None) -> list[str]:
    """The row's checked images (data URLs) from ``field``; none for a row without it."""
    value = row.data.get(field)
    if value is None or (isinstance(value, list | tuple) and not value):
        return []
    if images is None:
        raise no_vision(field)
    return images.urls(value, field, row.source)


def no_vision(field: str) -> InputError:
    """The error for image rows and a text-only model (a setup problem, not a row's)."""
    return InputError(
        f"the data has images (field {field!r}) but the model is not a vision-language model: "
        "train a vision-language checkpoint (e.g. Qwen2.5-VL), or drop the field"
    )
