"""The size rule every request passes, shared by gateway and worker so both refuse the same shapes."""

from __future__ import annotations

from depthserve.codec.errors import DepthShapeMismatch, ExtremeAspectRatio, ImageTooLarge, UndecodableImage

# 40 MP: a 48 MP phone photo must be downscaled by the client; anything bigger is refused
# from its header, before a single pixel is decoded.
DEFAULT_MAX_PIXELS = 40_000_000

# The model spends a fixed token budget on a grid of rows x cols at the image's aspect ratio; past
# about 4 x (smallest budget) the grid collapses to one row and its columns (its cost) grow without
# bound (a 1,000,000x1 image is a 1 x 19,000-token grid). 16:1 is wider than any camera or stitched
# panorama a depth model is fed, and keeps every preset's grid at least one row without clamping.
DEFAULT_MAX_ASPECT_RATIO = 16.0

# A generic .npy may hold HxWx3 points, so allow three values per pixel.
DEFAULT_MAX_NPY_ELEMENTS = 3 * DEFAULT_MAX_PIXELS


def check_image_size(
    width: int,
    height: int,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_aspect_ratio: float = DEFAULT_MAX_ASPECT_RATIO,
    what: str = "image",
) -> None:
    """Refuse a size (from a header or a tensor shape) that is empty, has too many pixels or is too narrow."""
    if width < 1 or height < 1:
        raise UndecodableImage(f"{what} is empty ({width}x{height} pixels)")
    pixels = width * height
    if pixels > max_pixels:
        raise ImageTooLarge(
            f"{what} of {width}x{height} pixels ({pixels}) exceeds the limit of {max_pixels} pixels; downscale it"
        )
    ratio = max(width, height) / min(width, height)
    if ratio > max_aspect_ratio:
        raise ExtremeAspectRatio(
            f"{what} of {width}x{height} pixels has an aspect ratio of {ratio:.4g}:1; "
            f"the limit is {max_aspect_ratio:g}:1 (crop it)"
        )


def check_same_size(depth_wh: tuple[int, int], image_wh: tuple[int, int]) -> None:
    """Refuse a depth map whose width and height differ from the image's, since they must be pixel-aligned."""
    if tuple(depth_wh) != tuple(image_wh):
        raise DepthShapeMismatch(
            f"depth map is {depth_wh[1]}x{depth_wh[0]} (HxW) but the image is {image_wh[1]}x{image_wh[0]}; "
            "they must have the same height and width"
        )
