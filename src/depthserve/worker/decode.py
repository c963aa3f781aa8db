"""Turn DepthInputs into pixels and metres, checking every cost bound from headers before anything is decoded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from depthserve.codec import (
    DEFAULT_MAX_ASPECT_RATIO,
    DEFAULT_MAX_PIXELS,
    CodecError,
    check_image_size,
    check_intrinsics,
    check_reply_size,
    check_same_size,
    decode_depth,
    decode_image,
    depth_size,
    image_size,
)
from depthserve.model.grid import DEFAULT_NUM_TOKENS_RANGE, check_num_tokens
from depthserve.protocol.depth_api import DepthInputs
from depthserve.settings import WorkerSettings
from depthserve.worker.runners.base import Prepared

MIB = 1024 * 1024


class BadRequest(ValueError):
    """A request the worker refuses before running it; the message goes to the client."""


@dataclass(frozen=True)
class InputLimits:
    """What one request may cost this worker: pixels, aspect ratio, token budget and reply bytes."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    max_aspect_ratio: float = DEFAULT_MAX_ASPECT_RATIO
    num_tokens_range: tuple[int, int] = DEFAULT_NUM_TOKENS_RANGE
    max_reply_bytes: int | None = None  # None: no message limit on this path


def input_limits(settings: WorkerSettings, num_tokens_range: tuple[int, int] = DEFAULT_NUM_TOKENS_RANGE) -> InputLimits:
    """The limits a worker's settings and its model's token range set; replies must fit one gRPC message."""
    return InputLimits(settings.max_pixels, settings.max_aspect_ratio, num_tokens_range, settings.max_message_mb * MIB)


def _size_of(image: bytes | np.ndarray) -> tuple[int, int]:
    """(width, height) of a tensor or of an encoded file's header."""
    if isinstance(image, np.ndarray):
        return int(image.shape[1]), int(image.shape[0])
    return image_size(image)


def measure(inputs: DepthInputs, limits: InputLimits) -> tuple[int, int]:
    """Check every input that sets the request's cost, from headers and shapes only; give (height, width)."""
    if inputs.num_tokens is not None:
        check_num_tokens(inputs.num_tokens, limits.num_tokens_range)
    width, height = _size_of(inputs.image)
    check_image_size(width, height, limits.max_pixels, limits.max_aspect_ratio)
    if inputs.depth is not None:
        depth_wh = _size_of(inputs.depth) if isinstance(inputs.depth, np.ndarray) else depth_size(inputs.depth)
        check_same_size(depth_wh, (width, height))
    if inputs.intrinsics is not None:
        check_intrinsics(inputs.intrinsics)
    elif inputs.output_format == "ply":
        raise BadRequest("format 'ply' needs camera intrinsics to back-project points")
    if limits.max_reply_bytes is not None:
        with_points = inputs.intrinsics is not None
        check_reply_size(width, height, inputs.output_format, with_points, limits.max_reply_bytes)
    return height, width


def decode_inputs(inputs: DepthInputs, limits: InputLimits, decode_pixels: bool = True) -> Prepared:
    """Check the request's cost, then decode the image (unless `decode_pixels` is False) and the depth."""
    height, width = measure(inputs, limits)
    image: np.ndarray | None = None
    if isinstance(inputs.image, np.ndarray):
        image = inputs.image
    elif decode_pixels:
        image = decode_image(inputs.image, max_pixels=limits.max_pixels)
        if image.shape[:2] != (height, width):  # a decoder that disagrees with its own header
            raise BadRequest(f"image header says {width}x{height} but it decodes to {image.shape[1]}x{image.shape[0]}")
    depth: np.ndarray | None = None
    if isinstance(inputs.depth, np.ndarray):
        depth = inputs.depth
    elif inputs.depth is not None:
        depth = decode_depth(inputs.depth, max_pixels=limits.max_pixels)
        check_same_size((depth.shape[1], depth.shape[0]), (width, height))
    return Prepared(inputs, height, width, image=image, depth=depth, intrinsics=inputs.intrinsics)


__all__ = ["BadRequest", "CodecError", "InputLimits", "decode_inputs", "input_limits", "measure"]
