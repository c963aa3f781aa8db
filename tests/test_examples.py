"""The shipped sample is what examples/make_sample.py renders from its seed, and looks like a sensor's output."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from PIL import Image

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_sample_files_are_the_seeded_render() -> None:
    spec = importlib.util.spec_from_file_location("make_sample", EXAMPLES / "make_sample.py")
    assert spec is not None and spec.loader is not None
    make_sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_sample)
    image, raw_depth = make_sample.render()
    shipped_image = np.asarray(Image.open(EXAMPLES / "sample.png"))
    shipped_depth = np.asarray(Image.open(EXAMPLES / "sample_depth.png"))
    rerun = "the shipped sample differs from its render: run examples/make_sample.py and commit the files"
    assert np.array_equal(shipped_image, image) and np.array_equal(shipped_depth, raw_depth), rerun
    assert shipped_image.shape == (240, 320, 3) and shipped_depth.dtype == np.uint16
    holes = shipped_depth == 0
    assert 0.02 < holes.mean() < 0.3  # a real sensor misses some pixels, not most
    assert shipped_depth[~holes].min() > 1000 and shipped_depth.max() < 6000  # a room, in millimetres
    assert sum(path.stat().st_size for path in EXAMPLES.glob("sample*.png")) < 250_000
