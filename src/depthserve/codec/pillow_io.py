"""The one boundary where Pillow is called and its exceptions become CodecErrors."""

from __future__ import annotations

import io
import re

from PIL import Image

from depthserve.codec.errors import ImageTooLarge, UndecodableImage

# Formats a client may send. EPS/PDF and other exotic plugins stay out: EPS shells out to
# Ghostscript, and the rest only widen the attack surface. MPO (phone JPEGs) opens as "JPEG".
RGB_FORMATS: tuple[str, ...] = ("PNG", "JPEG", "WEBP", "BMP", "TIFF")
DEPTH_FORMATS: tuple[str, ...] = ("PNG", "TIFF")

_PILLOW_PIXELS = re.compile(r"\((\d+) pixels\)")


def _too_large(pixels: int | None, max_pixels: int, what: str) -> ImageTooLarge:
    """Build the ImageTooLarge error with both numbers, so clients know how far to downscale."""
    claimed = f"{pixels} pixels" if pixels is not None else "more pixels than Pillow allows"
    return ImageTooLarge(f"{what} is too large: {claimed}, the limit is {max_pixels} pixels")


def _from_bomb(exc: Exception, max_pixels: int, what: str) -> ImageTooLarge:
    """Translate Pillow's decompression-bomb error or warning, keeping the pixel count it names."""
    found = _PILLOW_PIXELS.search(str(exc))
    return _too_large(int(found.group(1)) if found else None, max_pixels, what)


def check_pixels(width: int, height: int, max_pixels: int, what: str) -> None:
    """Refuse a header size above max_pixels before any pixel memory is allocated."""
    if width * height > max_pixels:
        raise _too_large(width * height, max_pixels, what)


def open_lazy(data: bytes, formats: tuple[str, ...], max_pixels: int | None, what: str) -> Image.Image:
    """Open an image reading only its header, refusing empty, unknown or oversized input."""
    if not data:
        raise UndecodableImage(f"empty {what}")
    try:
        im = Image.open(io.BytesIO(data), formats=list(formats))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        # The warning arrives here only when warnings are errors (python -W error).
        raise _from_bomb(exc, max_pixels or 2 * (Image.MAX_IMAGE_PIXELS or 0), what) from None
    except Image.UnidentifiedImageError:
        allowed = ", ".join(formats)
        raise UndecodableImage(f"{what} is not a readable image (allowed formats: {allowed})") from None
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types on hostile headers
        raise UndecodableImage(f"{what} could not be read: {exc}") from None
    if max_pixels is not None:
        check_pixels(im.width, im.height, max_pixels, what)
    return im


def load_pixels(im: Image.Image, max_pixels: int, what: str) -> None:
    """Decode the pixels, turning truncation and corruption into UndecodableImage."""
    try:
        im.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _from_bomb(exc, max_pixels, what) from None
    except Exception as exc:  # noqa: BLE001 - OSError (truncated), SyntaxError, zlib.error, ...
        raise UndecodableImage(f"{what} is truncated or corrupt: {exc}") from None
