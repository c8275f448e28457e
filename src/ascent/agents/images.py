"""Images in episodes: where a conversation's images are, how the chat template sees them, and
how a rendered span takes its images' tokens.

An image is an OpenAI content part holding its data URL, in any message of the conversation:

    {"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}

(``{"type": "image", "image": url}`` too). It comes from the row (its ``images``: each
``<image>`` placeholder or image part without a URL in the opening messages takes the row's
next image, in order) or from a step's observations (a tool's result, a user's turn).

The chat template sees each as ``{"type": "image"}`` and writes one image token between the
vision markers; the model's family then repeats the k-th image token of a rendered span as
often as the span's k-th image takes tokens (``ImageTokens.expand``). A sample holds its
images in the order of their image tokens (``Trajectory.images``). Every engine and the
trainer take the image tokens of a prompt as its images' (image k's on the tokens after image
k-1's), so an image token the policy sampled (it may sample any id) cannot be followed by
another turn: it ends the episode.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ascent.data.images import row_images_for
from ascent.rollout.protocol import Capability, RolloutBackend
from ascent.vision.prompts import IMAGE_PART_TYPES, PLACEHOLDER


@dataclass(frozen=True)
class ImageTokens:
    """How the policy reads images among its ids: ``token_id``, the one id that stands for
    image features, and ``expand(ids, urls)``, rendered ids holding one image token per image
    with the k-th repeated as often as image k takes tokens (ValueError otherwise)."""

    token_id: int
    expand: Callable[[list[int], list[str]], list[int]]


def image_tokens_of(backend: RolloutBackend, model_dir: str | None) -> ImageTokens | None:
    """The policy's image tokens as the family of the backend's in-process engine makes them
    (a backend without one: as the checkpoint at ``model_dir`` does, the data path's rule);
    None where the backend takes no images or the model is not a vision-language model."""
    if Capability.IMAGES not in backend.capabilities:
        return None
    prompts = getattr(backend.engine, "prompts", None)
    if prompts is not None:
        if prompts.image_token_id is None:
            return None
        return ImageTokens(prompts.image_token_id, prompts.with_image_tokens)
    rows = None if model_dir is None else row_images_for(model_dir)
    return None if rows is None else ImageTokens(rows.image_token_id, rows.tokens)


def part_url(part: dict) -> str | None:
    """The image URL of a content part (None for a text part or an image part without one)."""
    value = part.get("image_url", part.get("image"))
    return value.get("url") if isinstance(value, dict) else value


def message_images(messages: list[dict], need_urls: bool = True) -> list[str]:
    """The URLs of the messages' image parts, in order; ValueError for a part without its
    data URL (skipped when not ``need_urls``: a conversation that cannot take images only
    renders where they are, as ``ascent.gateway`` does before refusing them)."""
    urls = []
    for index, message in enumerate(messages):
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if part.get("type") not in IMAGE_PART_TYPES:
                continue
            url = part_url(part)
            if not need_urls and not url:
                continue
            if not isinstance(url, str) or not url.startswith("data:image/"):
                raise ValueError(
                    f"message {index} ({message.get('role')}) has an image part without a "
                    "data URL: give it as {'type': 'image_url', 'image_url': {'url': "
                    "'data:image/png;base64,...'}}"
                )
            urls.append(url)
    return urls


def template_messages(messages: list[dict]) -> list[dict]:
    """The messages as the chat template takes them: each image part as ``{"type": "image"}``
    (the image itself travels beside the ids)."""
    return [
        {**message, "content": [_placed(part) for part in message["content"]]}
        if isinstance(message.get("content"), list)
        else message
        for message in messages
    ]


def _placed(part: dict) -> dict:
    return {"type": "image"} if part.get("type") in IMAGE_PART_TYPES else part


def with_row_images(messages: list[dict], urls: list[str]) -> list[dict]:
    """The opening messages with the row's images in their places: each ``<image>``
    placeholder and each image part without a URL takes the next of ``urls``. Messages with
    no such place are kept as they are (an environment that placed the images itself);
    ValueError when places and images differ in number."""
    if not urls:
        return list(messages)
    places = sum(_places(message.get("content")) for message in messages)
    if not places:
        return list(messages)
    if places != len(urls):
        raise ValueError(
            f"the opening messages mark {places} image place(s) ({PLACEHOLDER} or image parts "
            f"without a URL) but the row has {len(urls)} image(s)"
        )
    images = iter(urls)
    return [_filled(message, images) for message in messages]


def _places(content: Any) -> int:
    if isinstance(content, str):
        return content.count(PLACEHOLDER)
    if isinstance(content, list):
        return sum(p.get("type") in IMAGE_PART_TYPES and not part_url(p) for p in content)
    return 0


def _filled(message: dict, images: Any) -> dict:
    content = message.get("content")
    if isinstance(content, str) and PLACEHOLDER in content:
        parts: list[dict] = []
        for index, piece in enumerate(content.split(PLACEHOLDER)):
            if index:
                parts.append({"type": "image_url", "image_url": {"url": next(images)}})
            if piece:
                parts.append({"type": "text", "text": piece})
        return {**message, "content": parts}
    if isinstance(content, list):
        parts = [
            {"type": "image_url", "image_url": {"url": next(images)}}
            if p.get("type") in IMAGE_PART_TYPES and not part_url(p)
            else p
            for p in content
        ]
        return {**message, "content": parts}
    return message
