"""Turn DepthInputs into pixels and metres, checking every size and value before the device sees it."""

from __future__ import annotations

import numpy as np

from depthserve.codec import (
    CodecError,
    InvalidIntrinsics,
    check_depth_shape,
    decode_depth,
    decode_image,
    image_size,
)
from depthserve.protocol.depth_api import DepthInputs
from depthserve.worker.runners.base import Prepared


class BadRequest(ValueError):
    """A request the worker refuses before running it; the message goes to the client."""


def decode_inputs(inputs: DepthInputs, max_pixels: int, decode_pixels: bool = True) -> Prepared:
    """Decode the image (or only read its size when `decode_pixels` is False), depth and intrinsics."""
    image: np.ndarray | None = None
    if isinstance(inputs.image, np.ndarray):
        image = inputs.image
        height, width = image.shape[:2]
        if height * width > max_pixels:
            raise BadRequest(f"image has {height * width} pixels, the limit is {max_pixels}")
        if height == 0 or width == 0:
            raise BadRequest("image tensor is empty")
    elif decode_pixels:
        image = decode_image(inputs.image, max_pixels=max_pixels)
        height, width = image.shape[:2]
    else:
        width, height = image_size(inputs.image)
        if height * width > max_pixels:
            raise BadRequest(f"image has {height * width} pixels, the limit is {max_pixels}")
    depth: np.ndarray | None = None
    if isinstance(inputs.depth, np.ndarray):
        depth = inputs.depth
    elif inputs.depth is not None:
        depth = decode_depth(inputs.depth, max_pixels=max_pixels)
    if depth is not None:
        check_depth_shape(depth, (height, width))
    intrinsics = inputs.intrinsics
    if intrinsics is not None and not np.isfinite(intrinsics).all():
        raise InvalidIntrinsics("intrinsics must be finite numbers")
    if inputs.output_format == "ply" and intrinsics is None:
        raise BadRequest("format 'ply' needs camera intrinsics to back-project points")
    return Prepared(inputs, height, width, image=image, depth=depth, intrinsics=intrinsics)


__all__ = ["BadRequest", "CodecError", "decode_inputs"]
