"""Images in chat requests: OpenAI's ``image_url`` content parts, for a vision-language model.

A user message's content may hold ``{"type": "image_url", "image_url": {"url": ...}}`` parts
(or ``"image_url": "..."``). The server fetches nothing: a URL must be a ``data:image/...;
base64,`` URL; the image is checked by the rules data rows follow (``ascent.vision.images``)
and a bad one is a 400 naming ``messages[i].content[j]``. The template renders each image
part as one image token, repeated as often as the image takes tokens; the engine then runs
the vision tower on the images at prefill.
"""

from typing import Any

from ascent.serve.schema import RequestError
from ascent.vision.images import BadImage, image_url
from ascent.vision.prompts import IMAGE_PART_TYPES, with_image_parts


def request_images(messages: list[dict]) -> list[str]:
    """The checked data URLs of the messages' image parts, in order; a RequestError naming
    the part otherwise."""
    urls = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in IMAGE_PART_TYPES:
                continue
            field = f"messages[{i}].content[{j}]"
            url = _url_of(part)
            if not isinstance(url, str) or not url.startswith("data:"):
                raise RequestError(
                    f"{field}: give the image as a data URL (data:image/png;base64,...); "
                    "ascent serve fetches nothing",
                    field,
                )
            try:
                urls.append(image_url(url))
            except BadImage as bad:
                raise RequestError(f"{field}: {bad}", field) from None
    return urls


def _url_of(part: dict) -> Any:
    value = part.get("image_url", part.get("image"))
    return value.get("url") if isinstance(value, dict) else value


def with_image_tokens(engine: Any, messages: list[dict], urls: list[str], render: Any) -> list[int]:
    """The prompt's token ids: ``render(messages)`` with image parts in the template's form,
    each image token repeated as often as its image takes (as the model's family does it:
    a 400 when the model takes no images)."""
    if not urls:
        return render(messages)
    shown, _ = with_image_parts(messages)
    try:  # the processor's own rules (an aspect ratio over 200), then the count of places
        return engine.prompts.with_image_tokens(render(shown), urls)
    except ValueError as bad:  # BadImage, or a model that takes no images
        raise RequestError(f"messages: {bad}", "messages") from None
