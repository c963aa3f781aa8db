"""Decode client depth uploads (16-bit millimetre PNG or float .npy in metres) to float32 metres."""

from __future__ import annotations

import numpy as np

from depthserve.codec.errors import DepthShapeMismatch, InvalidArray, InvalidDepth
from depthserve.codec.limits import DEFAULT_MAX_PIXELS
from depthserve.codec.npy import NPY_MAGIC, NpyHeader, array_from_npy, read_npy_header
from depthserve.codec.pillow_io import DEPTH_FORMATS, check_pixels, load_pixels, open_lazy

_MM_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
_FLOAT_KINDS = frozenset("f")
_HOW = "depth must be a 16-bit grayscale PNG in millimetres or a float .npy in metres (HxW)"


def _depth_hw(shape: tuple[int, ...]) -> tuple[int, int]:
    """Accept HxW, HxWx1 or 1xHxW so torch- and OpenCV-shaped arrays both work."""
    if len(shape) == 2:
        h, w = shape
    elif len(shape) == 3 and shape[2] == 1:
        h, w = shape[0], shape[1]
    elif len(shape) == 3 and shape[0] == 1:
        h, w = shape[1], shape[2]
    else:
        raise InvalidDepth(f"depth array has shape {shape}; {_HOW}")
    if h == 0 or w == 0:
        raise InvalidDepth(f"depth array is empty (shape {shape})")
    return h, w


def _npy_header(data: bytes, max_pixels: int) -> tuple[NpyHeader, tuple[int, int]]:
    """Read and check a depth .npy header, so the pixel limit is enforced before copying data."""
    try:
        header = read_npy_header(data, max_elements=max_pixels)
    except InvalidArray as exc:
        raise InvalidDepth(f"depth {exc}") from None
    h, w = _depth_hw(header.shape)
    check_pixels(w, h, max_pixels, "depth map")
    return header, (h, w)


def _depth_from_npy(data: bytes, max_pixels: int) -> np.ndarray:
    """Convert a float .npy (metres) or uint16 .npy (millimetres) to float32 metres."""
    header, hw = _npy_header(data, max_pixels)
    if header.dtype.kind in _FLOAT_KINDS and header.dtype.itemsize in (2, 4, 8):
        with np.errstate(over="ignore"):  # float64 beyond float32 range becomes inf, i.e. a hole
            return array_from_npy(data, header).reshape(hw).astype(np.float32, copy=False)
    if header.dtype.kind == "u" and header.dtype.itemsize == 2:
        return array_from_npy(data, header).reshape(hw).astype(np.float32) / np.float32(1000.0)
    raise InvalidDepth(f"depth .npy has dtype {header.dtype}; use float16/32/64 metres or uint16 millimetres")


def _depth_from_image(data: bytes, max_pixels: int) -> np.ndarray:
    """Convert a 16-bit (mm) or float (metres, TIFF) grayscale image to float32 metres."""
    im = open_lazy(data, DEPTH_FORMATS, max_pixels, "depth map")
    if im.mode not in _MM_MODES and im.mode != "F":
        raise InvalidDepth(f"depth image has mode {im.mode} (8-bit or colour); {_HOW}")
    load_pixels(im, max_pixels, "depth map")
    pixels = np.asarray(im)
    if im.mode == "F":
        return pixels.astype(np.float32)
    return pixels.astype(np.float32) / np.float32(1000.0)


def decode_depth(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Decode an uploaded depth map to float32 HxW metres; 0, NaN and inf are kept as holes.

    A .npy is recognised by its magic: float dtypes are metres, uint16 is millimetres. An image
    must be a 16-bit grayscale PNG (or TIFF) in millimetres, 0 meaning no measurement; a float
    ("F") TIFF is taken as metres. Values are never clipped or filtered here.
    """
    if data.startswith(NPY_MAGIC):
        return _depth_from_npy(data, max_pixels)
    return _depth_from_image(data, max_pixels)


def depth_size(data: bytes) -> tuple[int, int]:
    """Return (width, height) of a depth upload from its header, so the gateway can match it to the image."""
    if data.startswith(NPY_MAGIC):
        _, (h, w) = _npy_header(data, max_pixels=2**62)
        return w, h
    im = open_lazy(data, DEPTH_FORMATS, None, "depth map")
    return im.width, im.height


def check_depth_shape(depth: np.ndarray, image_hw: tuple[int, int]) -> None:
    """Refuse a depth map whose HxW differs from the image, since the model needs them pixel-aligned."""
    hw = tuple(depth.shape[:2])
    if depth.ndim != 2 or hw != tuple(image_hw):
        raise DepthShapeMismatch(
            f"depth map is {'x'.join(map(str, depth.shape))} (HxW) but the image is "
            f"{image_hw[0]}x{image_hw[1]}; they must have the same height and width"
        )
