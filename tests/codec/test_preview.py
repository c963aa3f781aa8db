"""Tests for encode_preview_png and the turbo colour map."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from depthserve.codec import encode_preview_png
from depthserve.codec.colormap import TURBO_LUT


def _read(data: bytes) -> np.ndarray:
    im = Image.open(io.BytesIO(data))
    assert im.format == "PNG" and im.mode == "RGB"
    return np.array(im)


def test_turbo_lut_runs_blue_to_red() -> None:
    assert TURBO_LUT.shape == (256, 3) and TURBO_LUT.dtype == np.uint8
    assert TURBO_LUT[0, 2] > TURBO_LUT[0, 0]  # far end is blue
    assert TURBO_LUT[255, 0] > TURBO_LUT[255, 2]  # near end is red


def test_rgb_png_of_right_size_with_near_warm_and_holes_black() -> None:
    depth = np.tile(np.linspace(1.0, 10.0, 64, dtype=np.float32), (40, 1))
    depth[0, 0], depth[0, 1] = np.nan, 0.0
    rgb = _read(encode_preview_png(depth))
    assert rgb.shape == (40, 64, 3)
    assert (rgb[0, 0] == 0).all() and (rgb[0, 1] == 0).all()
    near, far = rgb[20, 2].astype(int), rgb[20, -1].astype(int)
    assert near[0] > near[2] and far[2] > far[0]


def test_outliers_do_not_wash_out_range() -> None:
    depth = np.tile(np.linspace(1.0, 2.0, 100, dtype=np.float32), (100, 1))
    depth[0, 0] = 1000.0  # one far outlier beyond the 98th percentile
    rgb = _read(encode_preview_png(depth))
    assert len({tuple(c) for c in rgb[50]}) > 50  # the real range still spans many colours


def test_mask_all_invalid_and_flat() -> None:
    depth = np.full((8, 8), 3.0, dtype=np.float32)
    mask = np.zeros((8, 8), bool)
    mask[:4] = True
    rgb = _read(encode_preview_png(depth, mask))
    assert (rgb[4:] == 0).all() and (rgb[:4] != 0).any()
    assert (_read(encode_preview_png(np.full((3, 3), np.nan, np.float32))) == 0).all()
