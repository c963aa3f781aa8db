"""Tests for parse_intrinsics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from depthserve.codec import InvalidIntrinsics, parse_intrinsics

K = np.array([[500.0, 0.0, 320.0], [0.0, 510.0, 240.0], [0.0, 0.0, 1.0]], dtype=np.float32)


@pytest.mark.parametrize(
    "value",
    [
        "[[500, 0, 320], [0, 510, 240], [0, 0, 1]]",
        "[500, 0, 320, 0, 510, 240, 0, 0, 1]",
        "[500, 510, 320, 240]",
        "500,510,320,240",
        " 500 510\t320\n240 ",
        "500, 0, 320, 0, 510, 240, 0, 0, 1",
        '{"fx": 500, "fy": 510, "cx": 320, "cy": 240}',
        b"500,510,320,240",
        bytearray(b"[[500,0,320],[0,510,240],[0,0,1]]"),
        [500, 510, 320, 240],
        (500.0, 0, 320, 0, 510, 240, 0, 0, 1),
        [[500, 0, 320], [0, 510, 240], [0, 0, 1]],
        ["500", "510", "320", "240"],
        {"fx": 500, "fy": 510, "cx": 320, "cy": 240},
        K.astype(np.float64),
        np.array([500, 510, 320, 240]),
    ],
)
def test_accepted_forms(value: Any) -> None:
    out = parse_intrinsics(value)
    assert out.dtype == np.float32 and out.shape == (3, 3)
    assert np.array_equal(out, K)


def test_normalised_kept_as_given() -> None:
    out = parse_intrinsics([0.8, 1.1, 0.5, 0.5])
    assert out[0, 0] == pytest.approx(0.8) and out[0, 2] == pytest.approx(0.5)


def test_skew_allowed() -> None:
    assert parse_intrinsics([[500, 1.5, 320], [0, 510, 240], [0, 0, 1]])[0, 1] == pytest.approx(1.5)


@pytest.mark.parametrize(
    "value,match",
    [
        ("", "empty"),
        ("[1, 2, 3]", "3 numbers, expected 4 or 9"),
        ("1,2,3,4,5", "5 numbers"),
        ("[500, nan, 320, 240]", "JSON"),
        ("500,NaN,320,240", "NaN or infinity"),
        ([500, float("inf"), 320, 240], "NaN or infinity"),
        ([0, 510, 320, 240], "focal lengths must be positive"),
        ("-500,510,320,240", "focal lengths must be positive"),
        ("[[500,0,320],[0,510,240],[0,0,2]]", "last row"),
        ("[[500,0,320],[0,510,240]]", "shape"),
        ("fx,fy,cx,cy", "must be numbers"),
        ("[[1,2],[3]]", "must be numbers"),
        ('{"fx": 500}', "lacks fy, cx, cy"),
        ("{not json", "not valid JSON"),
        (b"\xff\xfe", "UTF-8"),
        (np.zeros((2, 3, 3)), "shape"),
        ("[" * 2000 + "]" * 2000, "nested too deeply"),
        (b"[" * 3000, "nested too deeply"),
        ("1," * 3000, "more than 4096"),
    ],
)
def test_rejected(value: Any, match: str) -> None:
    with pytest.raises(InvalidIntrinsics, match=match):
        parse_intrinsics(value)
