"""Tests for OUTPUT_FORMATS and format_from_accept."""

from __future__ import annotations

import pytest

from depthserve.codec import OUTPUT_FORMATS, CodecError, UnsupportedFormat, format_from_accept


def test_output_formats_table() -> None:
    assert OUTPUT_FORMATS["npy"] == ("application/x-npy", ".npy")
    assert OUTPUT_FORMATS["png16"] == ("image/png", ".png")
    assert OUTPUT_FORMATS["preview"] == ("image/png", ".png")
    assert OUTPUT_FORMATS["ply"] == ("application/x-ply", ".ply")
    assert OUTPUT_FORMATS["raw"][0] == "application/octet-stream"
    with pytest.raises(TypeError):
        OUTPUT_FORMATS["x"] = ("a", "b")  # type: ignore[index]


@pytest.mark.parametrize(
    "accept,param,expected",
    [
        (None, None, "npy"),
        ("", None, "npy"),
        ("*/*", None, "npy"),
        ("application/x-npy", None, "npy"),
        ("image/png", None, "png16"),
        ("IMAGE/PNG", None, "png16"),
        ("image/png;preview", None, "preview"),
        ("image/png; preview=1; q=0.9", None, "preview"),
        ("image/png;preview=false", None, "png16"),
        ("application/x-ply", None, "ply"),
        ("model/ply", None, "ply"),
        ("application/octet-stream", None, "raw"),
        ("image/*", None, "png16"),
        ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", None, "npy"),
        ("image/png;q=0.5, model/ply", None, "ply"),
        ("*/*, image/png", None, "png16"),  # exact type beats wildcard at equal q
        ("*/*, application/x-npy;q=0", None, "png16"),  # npy refused, wildcard picks the next
        ("image/png;q=0, application/x-npy;q=0.1", None, "npy"),
        ("image/png", "ply", "ply"),  # ?format= wins over Accept
        ("text/html", "preview", "preview"),
        (None, " NPY ", "npy"),
        ("model/ply", "", "ply"),  # an empty ?format= is ignored
    ],
)
def test_choice(accept: str | None, param: str | None, expected: str) -> None:
    assert format_from_accept(accept, param) == expected


@pytest.mark.parametrize(
    "accept,param",
    [
        (None, "jpeg"),
        ("image/png", "tiff"),
        ("text/html", None),
        ("image/png;q=0", None),
        ("garbage", None),
        ("image/png;q=abc", None),
    ],
)
def test_unsupported_lists_formats(accept: str | None, param: str | None) -> None:
    with pytest.raises(UnsupportedFormat) as info:
        format_from_accept(accept, param)
    assert isinstance(info.value, CodecError)
    for name in OUTPUT_FORMATS:
        assert name in str(info.value)
