"""The seeded presets draw a full, plausible depth map on a typical photo, as a newcomer's first preview."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from depthserve.codec.preview import encode_preview_png
from depthserve.model import LingBotDepth, build_model, load_model, predict
from depthserve.model.demo_heads import FAR_M, NEAR_M
from depthserve.testing.samples import seeded_image


def outdoor_scene(height: int = 240, width: int = 320) -> np.ndarray:
    """A drawn photo: sky, hills, grass, a house, a tree and a ball, with sensor noise."""
    picture = Image.new("RGB", (width, height), (120, 170, 240))
    draw = ImageDraw.Draw(picture)
    horizon = height * 9 // 20
    draw.rectangle([0, horizon, width, height], fill=(90, 130, 60))
    draw.polygon([(0, horizon), (width // 5, horizon * 3 // 5), (width * 2 // 5, horizon)], fill=(100, 110, 120))
    draw.rectangle([width * 5 // 8, height * 2 // 5, width * 7 // 8, height * 5 // 6], fill=(170, 60, 50))
    draw.ellipse([width // 8, height * 5 // 8, width // 3, height * 11 // 12], fill=(40, 80, 160))
    draw.ellipse([width * 2 // 5, height // 2, width * 3 // 5, height * 3 // 4], fill=(40, 120, 40))
    noise = np.random.default_rng(3).integers(-8, 9, (height, width, 3))
    return (np.asarray(picture).astype(np.int16) + noise).clip(0, 255).astype(np.uint8)


@pytest.mark.parametrize("name", ["outdoor_scene", "seeded_image"])
@pytest.mark.parametrize("level", [0, 9])
def test_tiny_keeps_every_pixel_with_depth_far_at_the_top(tiny: LingBotDepth, name: str, level: int) -> None:
    image = outdoor_scene() if name == "outdoor_scene" else seeded_image(240, 320)
    out = predict(tiny, image, resolution_level=level)
    assert out["mask"].mean() >= 0.99  # was 0.14: a black preview with one coloured strip
    depth = out["depth"][out["mask"]]
    assert np.isfinite(depth).all() and depth.min() > NEAR_M / 2 and depth.max() < FAR_M * 2
    top, bottom = np.median(out["depth"][:40]), np.median(out["depth"][-40:])
    assert top > 2 * bottom  # a floor seen from eye height, not a left-to-right strip


def test_tiny_preview_is_coloured_everywhere(tiny: LingBotDepth) -> None:
    out = predict(tiny, outdoor_scene())
    preview = np.asarray(Image.open(io.BytesIO(encode_preview_png(out["depth"], out["mask"]))))
    black = (preview == 0).all(axis=-1)
    assert black.mean() < 0.01
    assert len(np.unique(preview.reshape(-1, 3), axis=0)) > 64  # a ramp of colours, not one flat colour


def test_demo_heads_change_values_only(tiny: LingBotDepth) -> None:
    untrained = build_model("tiny", seed=0)
    keys, shapes = tiny.state_dict(), untrained.state_dict()
    assert list(keys) == list(shapes)
    assert all(keys[key].shape == shapes[key].shape for key in keys)
    changed = {key for key in keys if not torch.equal(keys[key], shapes[key])}
    heads = ("mask_head", "depth_head")
    assert changed == {f"{head}.output_blocks.4.{part}" for head in heads for part in ("weight", "bias")}


def test_demo_heads_are_fitted_once_for_every_dtype() -> None:
    reference, halved = load_model("tiny"), load_model("tiny", dtype=torch.bfloat16)
    for key, value in reference.state_dict().items():
        assert torch.equal(value.to(torch.bfloat16), halved.state_dict()[key]), key
