"""Back-projected points and the decoder's UV conditioning."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from depthserve.model import LingBotDepth, ModelInputError
from depthserve.model.geometry import intrinsics_are_normalized, normalized_view_plane_uv

FX, FY, CX, CY = 70.0, 65.0, 41.5, 28.0
PIXEL_K = torch.tensor([[FX, 0.0, CX], [0.0, FY, CY], [0.0, 0.0, 1.0]])


def test_points_match_hand_back_projection(tiny: LingBotDepth, samples: Any) -> None:
    image, depth = samples
    out = tiny.infer(image[1], depth[1], intrinsics=PIXEL_K, apply_mask=False)
    points, z = out["points"], out["depth"]
    assert points.shape == (60, 80, 3) and points.dtype == torch.float32
    for v, u in [(0, 0), (0, 79), (59, 0), (30, 41), (17, 63)]:
        expected = [(u - CX) * z[v, u] / FX, (v - CY) * z[v, u] / FY, z[v, u]]
        torch.testing.assert_close(points[v, u], torch.stack(expected), rtol=1e-6, atol=1e-6)


def test_pixel_and_normalised_intrinsics_agree(tiny: LingBotDepth, samples: Any) -> None:
    image, depth = samples
    scale = torch.tensor([[1 / 80], [1 / 60], [1.0]])
    normalised = PIXEL_K * scale
    per_sample = torch.stack([PIXEL_K, normalised, PIXEL_K, normalised])
    assert intrinsics_are_normalized(per_sample).tolist() == [False, True, False, True]
    out = tiny.infer(image, depth, intrinsics=per_sample, apply_mask=False)
    shared = tiny.infer(image, depth, intrinsics=PIXEL_K, apply_mask=False)
    torch.testing.assert_close(out["points"], shared["points"])


def test_masked_points_are_inf(tiny: LingBotDepth, samples: Any) -> None:
    image, depth = samples
    out = tiny.infer(image, depth, intrinsics=PIXEL_K)
    mask = out["mask"]
    assert torch.isinf(out["points"][~mask]).all()
    assert torch.isfinite(out["points"][mask]).all()


def test_bad_intrinsics_raise(tiny: LingBotDepth, samples: Any) -> None:
    image, _ = samples
    nan_k = PIXEL_K.clone()
    nan_k[0, 0] = float("nan")
    zero_k = PIXEL_K.clone()
    zero_k[1, 1] = 0.0
    for bad in (nan_k, zero_k, torch.eye(2)):
        with pytest.raises(ModelInputError):
            tiny.infer(image[0], intrinsics=bad)


def test_uv_map_spans_and_layout() -> None:
    uv = normalized_view_plane_uv(4, 3, 4 / 3, torch.float32, torch.device("cpu"))
    assert uv.shape == (2, 3, 4)
    span_x, span_y = 0.8, 0.6  # a / sqrt(1 + a^2), 1 / sqrt(1 + a^2) for a = 4/3
    assert uv[0, 0, 0] == pytest.approx(-span_x * 3 / 4) and uv[0, 0, -1] == pytest.approx(span_x * 3 / 4)
    assert uv[1, 0, 0] == pytest.approx(-span_y * 2 / 3) and uv[1, -1, 0] == pytest.approx(span_y * 2 / 3)
    assert torch.equal(uv[0, 0], uv[0, 2]) and torch.equal(uv[1, :, 0], uv[1, :, 3])
