"""Images as rows carry them, checked once and kept in one form: a PNG or JPEG data URL.

A row's image may be given as encoded bytes, a ``{"bytes": ..., "path": ...}`` dict (how
``datasets``' Image feature stores it in parquet), a file path (relative paths are taken
from the data file's directory), a ``data:image/...;base64,`` URL, or a PIL image; a remote
URL (``http://``, ``s3://``...) is refused with how to embed it: images are never fetched.
Every form is decoded in full here, so a broken image is found when the data is loaded, not
mid-step, and kept as one string: the data URL is JSON (batches with images save and resume like any
other), pickles by reference across Ray, and is what ``ascent serve`` and vLLM take as an
OpenAI ``image_url``.

The rules, applied to every image, in order:

- it must decode completely (truncated or corrupt bytes are refused);
- it must have at least one pixel and at most ``max_pixels`` (read from the header, before
  decoding, so a 20000 x 20000 image is refused without allocating 1.2 GB);
- any mode other than RGB is converted to RGB, transparency composited onto white (the rule
  transformers' image processors apply), and the result re-encoded as PNG; RGB PNG and JPEG
  bytes are kept as given.

How large the image is shown to the model is then the image processor's rule
(``ascent.vision.processing``): resized, aspect kept, to a multiple of the patch grid within
its ``min_pixels``..``max_pixels``.
"""

import base64
import binascii
import io
import re
from pathlib import Path
from typing import Any

from ascent.errors import InputError

# Large photos pass (a 48-megapixel phone image is 8064 x 6048); a scan of 20000 x 20000 does
# not: decoding it alone takes 1.2 GB, and the processor would shrink it to a few hundred
# patches anyway.
DEFAULT_MAX_PIXELS = 50_000_000
KEPT_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg"}
REMOTE_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", re.ASCII)  # http://, s3://, gs://...


class BadImage(InputError):
    """An image that cannot be used; the message says which rule it breaks."""


def image_url(
    value: Any, *, base_dir: Path | None = None, max_pixels: int = DEFAULT_MAX_PIXELS
) -> str:
    """The checked image as a data URL, from any of the forms above; BadImage otherwise."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return _encode_png(_rgb(value))
    data = _encoded_bytes(value, base_dir)
    return _checked_url(data, max_pixels)


def decode_url(url: str) -> "Any":
    """The RGB PIL image of a data URL made by ``image_url`` (or any base64 image data URL)."""
    from PIL import Image

    image = Image.open(io.BytesIO(_url_bytes(url)))
    image.load()
    return _rgb(image)


def _encoded_bytes(value: Any, base_dir: Path | None) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict):
        if value.get("bytes") is not None:
            return _encoded_bytes(value["bytes"], base_dir)
        if value.get("path") is not None:
            return _encoded_bytes(value["path"], base_dir)
        raise BadImage("an image dict needs 'bytes' or 'path' (datasets' Image form)")
    if isinstance(value, str):
        if value.startswith("data:"):
            return _url_bytes(value)
        if REMOTE_URL.match(value) and not value.startswith("file://"):
            raise BadImage(
                f"{value[:80]!r} is a URL, and images are not fetched (a run reads its data "
                "from disk only, so it is reproducible and never waits on a network): "
                "download the image and give its path, or embed it as bytes or a "
                "data:image/...;base64 URL"
            )
        return _file_bytes(value, base_dir)
    raise BadImage(
        f"an image must be bytes, a path, a data URL, a {{'bytes', 'path'}} dict or a PIL "
        f"image, not {type(value).__name__}"
    )


def _url_bytes(url: str) -> bytes:
    header, _, payload = url.partition(",")
    if not header.startswith("data:image/") or not header.endswith(";base64"):
        raise BadImage(f"not a base64 image data URL: {url[:40]!r}...")
    try:
        return base64.b64decode(payload, validate=True)
    except binascii.Error as error:
        raise BadImage(f"the data URL's base64 payload is invalid: {error}") from None


def _file_bytes(path: str, base_dir: Path | None) -> bytes:
    file = Path(path.removeprefix("file://")).expanduser()
    if not file.is_absolute() and base_dir is not None:
        file = base_dir / file
    if not file.is_file():
        raise BadImage(f"image file {str(file)!r} does not exist")
    return file.read_bytes()


def _checked_url(data: bytes, max_pixels: int) -> str:
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        if width < 1 or height < 1:
            raise BadImage(f"the image has no pixels ({width} x {height})")
        if width * height > max_pixels:
            raise BadImage(
                f"the image is {width} x {height} = {width * height:,} pixels, over the limit "
                f"of {max_pixels:,} (data.max_image_pixels): shrink it before training, or "
                "raise the limit"
            )
        image.load()  # decodes every pixel: a truncated file fails here
    except BadImage:
        raise
    except Image.DecompressionBombError as error:  # PIL's own bound, met before ours
        raise BadImage(
            f"{error} It is over the limit of {max_pixels:,} pixels (data.max_image_pixels): "
            "shrink it before training"
        ) from None
    except (OSError, ValueError, SyntaxError) as error:
        raise BadImage(f"the image cannot be decoded: {type(error).__name__}: {error}") from None
    if image.mode == "RGB" and image.format in KEPT_FORMATS:
        return _as_url(data, KEPT_FORMATS[image.format])
    return _encode_png(_rgb(image))


def _rgb(image: Any) -> Any:
    """RGB, with any transparency composited onto white."""
    from PIL import Image

    if image.mode == "RGB":
        return image
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def _encode_png(image: Any) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return _as_url(buffer.getvalue(), "image/png")


def _as_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
