"""The stock `image` input: base64-encoded images, handed to vLLM as multi-modal data."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from PIL import Image

# Generous defaults. Images are decoded here, in the backend process every request
# shares, before vLLM sees them: without a cap, one request with many or huge images
# (or a small file that decompresses to billions of pixels) can exhaust its memory.
MAX_IMAGES = 32
MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGE_PIXELS = 8192 * 8192


class ImageError(ValueError):
    """An image input the backend refuses; the message names the element."""


def _base64_text(value: Any, where: str) -> str:
    """The base64 payload, without a `data:...;base64,` prefix or line breaks."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            raise ImageError(f"{where} is not valid base64 (it holds non-ASCII bytes)") from None
    if not isinstance(value, str):
        raise ImageError(f"{where} must be a base64 string, got {type(value).__name__}")
    text = value.strip()
    if text[:5].lower() == "data:":
        header, comma, text = text.partition(",")
        if not comma or not header.lower().endswith(";base64"):
            raise ImageError(f"{where}: a data URL must be base64-encoded, as in data:image/png;base64,...")
    return "".join(text.split())


def _decode(value: Any, where: str, max_bytes: int, max_pixels: int) -> Image.Image:
    text = _base64_text(value, where)
    if len(text) // 4 * 3 > max_bytes:  # checked before decoding, so the limit also bounds the work
        raise ImageError(f"{where} is larger than {max_bytes} bytes")
    try:
        data = base64.b64decode(text, validate=True)
    except ValueError as exc:  # binascii.Error, or non-ASCII text
        raise ImageError(f"{where} is not valid base64: {exc}") from None
    if not data:
        raise ImageError(f"{where} is empty")
    try:  # Pillow's readers raise many exception types on data they cannot read
        image = Image.open(io.BytesIO(data))
    except Exception as exc:
        raise ImageError(f"{where} is not a readable image: {exc}") from None
    with image:
        if image.width * image.height > max_pixels:
            raise ImageError(f"{where} has {image.width}x{image.height} pixels, more than the {max_pixels} allowed")
        try:
            return image.convert("RGB")
        except Exception as exc:
            raise ImageError(f"{where} is a damaged image: {exc}") from None


def decode_images(
    values: Any,
    *,
    max_images: int = MAX_IMAGES,
    max_bytes: int = MAX_IMAGE_BYTES,
    max_pixels: int = MAX_IMAGE_PIXELS,
) -> list[Image.Image]:
    """RGB images from the `image` tensor (any shape) or a list of base64 strings or bytes.

    `max_bytes` caps each decoded file and `max_pixels` each image's width x height.
    """
    elements = np.asarray(values, dtype=object).reshape(-1)
    if elements.size == 0:
        raise ImageError("the image input is empty: send at least one base64-encoded image, or leave the input out")
    if elements.size > max_images:
        raise ImageError(f"too many images: {elements.size}, at most {max_images} per request")
    return [_decode(value, f"image[{index}]", max_bytes, max_pixels) for index, value in enumerate(elements)]


def multi_modal_data(images: list[Image.Image]) -> dict[str, Image.Image | list[Image.Image]]:
    """vLLM's multi_modal_data: one image alone, several as a list."""
    if not images:
        raise ImageError("no images to pass to the model")
    return {"image": images[0] if len(images) == 1 else list(images)}
