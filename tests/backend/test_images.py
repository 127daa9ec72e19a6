from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image

from vllm_backend.images import ImageError, decode_images, multi_modal_data


def encoded(
    size: tuple[int, int] = (7, 5), mode: str = "RGBA", fmt: str = "PNG", color: object = (10, 20, 30, 255)
) -> bytes:
    """A base64 image file built in memory."""
    buffer = io.BytesIO()
    Image.new(mode, size, color).save(buffer, format=fmt)
    return base64.b64encode(buffer.getvalue())


def test_decodes_a_triton_tensor_to_rgb() -> None:
    tensor = np.array([encoded(), encoded((3, 4), "L", "JPEG", 200)], dtype=object)
    images = decode_images(tensor)
    assert [(image.size, image.mode) for image in images] == [((7, 5), "RGB"), ((3, 4), "RGB")]
    assert images[0].getpixel((6, 4)) == (10, 20, 30)


def test_accepts_str_data_urls_and_line_breaks() -> None:
    text = encoded().decode()
    wrapped = "\n".join(text[i : i + 16] for i in range(0, len(text), 16))
    images = decode_images([f"data:image/png;base64,{text}", wrapped, b"DATA:image/png;BASE64," + encoded()])
    assert [image.size for image in images] == [(7, 5)] * 3


def test_any_tensor_shape() -> None:
    assert len(decode_images(np.array([[encoded(), encoded()]], dtype=object))) == 2


@pytest.mark.parametrize(
    "value, problem",
    [
        (b"not base64!", r"image\[0\] is not valid base64"),
        ("aGVsbG8", r"image\[0\] is not valid base64"),  # bad padding
        ("\u00e9t\u00e9", r"image\[0\] is not valid base64"),
        (b"\x89PNG\r\n", r"image\[0\] is not valid base64 \(it holds non-ASCII bytes\)"),
        (base64.b64encode(b"hello, world"), r"image\[0\] is not a readable image"),
        ("", r"image\[0\] is empty"),
        ("data:image/png,abc", r"image\[0\]: a data URL must be base64-encoded"),
        (12, r"image\[0\] must be a base64 string, got int"),
    ],
)
def test_errors(value: object, problem: str) -> None:
    with pytest.raises(ImageError, match=problem):
        decode_images(np.array([value], dtype=object))


def test_damaged_image_names_its_element() -> None:
    png = base64.b64decode(encoded((64, 64), "RGB", color=(1, 2, 3)))
    truncated = base64.b64encode(png[: len(png) // 2])
    with pytest.raises(ImageError, match=r"image\[1\]"):
        decode_images([encoded(), truncated])


def test_empty_input() -> None:
    with pytest.raises(ImageError, match="the image input is empty"):
        decode_images(np.array([], dtype=object))


def test_limits() -> None:
    with pytest.raises(ImageError, match="too many images: 3, at most 2"):
        decode_images([encoded()] * 3, max_images=2)
    with pytest.raises(ImageError, match=r"image\[0\] is larger than 10 bytes"):
        decode_images([encoded()], max_bytes=10)
    with pytest.raises(ImageError, match=r"image\[0\] has 7x5 pixels, more than the 34 allowed"):
        decode_images([encoded()], max_pixels=34)
    assert len(decode_images([encoded()] * 2, max_images=2, max_pixels=35)) == 2


def test_multi_modal_data() -> None:
    one, two = decode_images([encoded(), encoded((2, 2))])
    assert multi_modal_data([one]) == {"image": one}
    assert multi_modal_data([one, two]) == {"image": [one, two]}
    with pytest.raises(ImageError):
        multi_modal_data([])
