"""Where a conversation's images go: ``<image>`` placeholders, content parts, image tokens.

verl's multimodal rows mark each image's place in the prompt text with ``<image>``, the k-th
placeholder standing for the k-th entry of the row's ``images`` column. Chat templates of
vision-language models take the content-part form instead, so a message whose text holds
placeholders becomes parts: ``"Count <image> dots"`` ->
``[{"type": "text", "text": "Count "}, {"type": "image"}, {"type": "text", "text": " dots"}]``.
Messages that already use parts (``{"type": "image"}`` or ``{"type": "image_url"}``) keep
them. The template renders each image part as one image token between vision start and end
tokens (Qwen2-VL: ``<|vision_start|><|image_pad|><|vision_end|>``), and ``expand_image_tokens``
repeats the k-th image token as often as the k-th image has tokens in the sequence.
"""

from typing import Any

from ascent.vision.images import BadImage

PLACEHOLDER = "<image>"
IMAGE_PART_TYPES = ("image", "image_url")


def with_image_parts(messages: list[dict]) -> tuple[list[dict], int]:
    """``messages`` with ``<image>`` placeholders turned into image parts, and how many image
    parts the conversation has in all."""
    converted, count = [], 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str) and PLACEHOLDER in content:
            content = _parts(content)
        if isinstance(content, list):
            count += sum(1 for part in content if part.get("type") in IMAGE_PART_TYPES)
            content = [_image_part(part) for part in content]
        converted.append({**message, "content": content})
    return converted, count


def _parts(text: str) -> list[dict]:
    parts: list[dict] = []
    for index, piece in enumerate(text.split(PLACEHOLDER)):
        if index:
            parts.append({"type": "image"})
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts


def _image_part(part: dict) -> dict:
    # The image itself travels in the row's images; the template needs only its place.
    return {"type": "image"} if part.get("type") in IMAGE_PART_TYPES else part


def expand_image_tokens(ids: list[int], image_token_id: int, counts: list[int]) -> list[int]:
    """``ids`` with its k-th ``image_token_id`` repeated ``counts[k]`` times; BadImage when
    the rendered prompt does not hold one image token per image."""
    return repeat_per_token(ids, image_repeats(ids, image_token_id, counts))


def collapse_image_runs(ids: list[int], image_token_id: int) -> list[int]:
    """``ids`` with every run of consecutive ``image_token_id`` tokens (one image's, once
    expanded) cut to one token: the form a server that expands images itself expects."""
    return [
        token
        for i, token in enumerate(ids)
        if token != image_token_id or i == 0 or ids[i - 1] != image_token_id
    ]


def image_repeats(ids: list[int], image_token_id: int, counts: list[int]) -> list[int]:
    """How often each token of ``ids`` appears once its image tokens are expanded: 1 for a
    text token, ``counts[k]`` for the k-th image token (apply to aligned lists, such as a
    loss mask, with ``repeat_per_token``)."""
    found = sum(1 for token in ids if token == image_token_id)
    if found != len(counts):
        raise BadImage(
            f"the prompt renders {found} image place(s) but the row has {len(counts)} image(s): "
            f"put one {PLACEHOLDER} in the prompt text per entry of 'images'"
        )
    images = iter(counts)
    return [next(images) if token == image_token_id else 1 for token in ids]


def repeat_per_token(values: list, repeats: list[int]) -> list:
    """Each value repeated as ``repeats`` says."""
    return [value for value, times in zip(values, repeats, strict=True) for _ in range(times)]


def image_token_id(config: Any) -> int:
    """The image token of a vision-language model's config (``image_token_id``)."""
    token = getattr(config, "image_token_id", None)
    if token is None:
        raise ValueError(
            f"{type(config).__name__} has no image_token_id: not a vision-language model"
        )
    return int(token)


def is_vision_language(config: Any) -> bool:
    """Whether a transformers config is a vision-language model's (it has a vision tower)."""
    return getattr(config, "vision_config", None) is not None


def vision_tower(model: Any) -> Any:
    """The vision tower of a transformers vision-language model (its patch embedding,
    blocks and the merger that projects into the language model)."""
    backbone = model.base_model
    for name in ("visual", "vision_tower", "vision_model"):
        tower = getattr(backbone, name, None)
        if tower is not None:
            return tower
    raise ValueError(f"cannot find the vision tower of {type(model).__name__}")
