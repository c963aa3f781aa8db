"""The shared size rule: pixels, aspect ratio and depth size, refused from numbers alone."""

from __future__ import annotations

import pytest

from depthserve.codec import (
    DEFAULT_MAX_ASPECT_RATIO,
    DEFAULT_MAX_PIXELS,
    CodecError,
    DepthShapeMismatch,
    ExtremeAspectRatio,
    ImageTooLarge,
    UndecodableImage,
    check_image_size,
    check_same_size,
)
from depthserve.settings import GatewaySettings, WorkerSettings


def test_settings_defaults_are_the_codec_defaults() -> None:
    for settings in (WorkerSettings(), GatewaySettings()):
        assert settings.max_pixels == DEFAULT_MAX_PIXELS
        assert settings.max_aspect_ratio == DEFAULT_MAX_ASPECT_RATIO


@pytest.mark.parametrize("width,height", [(640, 480), (480, 640), (1, 1), (1600, 100), (100, 1600), (6000, 6000)])
def test_ordinary_sizes_pass(width: int, height: int) -> None:
    check_image_size(width, height)


def test_a_million_by_one_image_is_refused_for_its_aspect_ratio() -> None:
    with pytest.raises(
        ExtremeAspectRatio, match=r"1000000x1 pixels has an aspect ratio of 1e\+06:1; the limit is 16:1"
    ):
        check_image_size(1_000_000, 1)
    with pytest.raises(ExtremeAspectRatio, match="the limit is 16:1"):
        check_image_size(1, 1700)  # tall is as bad as wide
    with pytest.raises(ExtremeAspectRatio, match="the limit is 4:1"):
        check_image_size(500, 100, max_aspect_ratio=4)


def test_too_many_pixels_names_the_limit() -> None:
    with pytest.raises(ImageTooLarge, match="8000x6000 pixels \\(48000000\\) exceeds the limit of 40000000 pixels"):
        check_image_size(8000, 6000)
    with pytest.raises(ImageTooLarge, match="limit of 100 pixels"):
        check_image_size(11, 10, max_pixels=100)


@pytest.mark.parametrize("width,height", [(0, 10), (10, 0), (-1, 5)])
def test_empty_sizes_are_refused(width: int, height: int) -> None:
    with pytest.raises(UndecodableImage, match="empty"):
        check_image_size(width, height)


def test_depth_must_match_the_image() -> None:
    check_same_size((64, 48), (64, 48))
    with pytest.raises(DepthShapeMismatch, match="depth map is 6000x8000 \\(HxW\\) but the image is 48x64"):
        check_same_size((8000, 6000), (64, 48))


def test_every_refusal_is_a_codec_error() -> None:
    for cls in (ExtremeAspectRatio, ImageTooLarge, DepthShapeMismatch, UndecodableImage):
        assert issubclass(cls, CodecError)
