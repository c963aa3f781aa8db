"""The analytic FLOP count agrees with model.md §5 and with torch's FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from depthserve.model import PRESETS, build_model
from depthserve.model.flops import model_flops


def test_vitl14_matches_published_figures() -> None:
    full = model_flops(PRESETS["vitl14"], 480, 640, 9)
    assert full["vit"] / 1e12 == pytest.approx(9.40, abs=0.02)  # 9.41 here; the brief rounds
    assert full["neck"] / 1e12 == pytest.approx(0.31, abs=0.01)
    assert full["heads"] / 1e12 == pytest.approx(0.43, abs=0.01)
    assert full["total"] / 1e12 == pytest.approx(10.2, abs=0.05)
    assert model_flops(PRESETS["vitl14"], 480, 640, 9, depth_tokens=0)["total"] / 1e12 == pytest.approx(4.2, abs=0.05)
    assert model_flops(PRESETS["vitl14"], 480, 640, 0)["total"] / 1e12 == pytest.approx(2.3, abs=0.05)


@pytest.mark.parametrize("with_depth", [True, False])
def test_counter_on_meta_device_agrees(with_depth: bool) -> None:
    model = build_model("vitl14", device="meta")
    image = torch.empty(1, 3, 120, 160, device="meta")
    depth = torch.empty(1, 120, 160, device="meta") if with_depth else None
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(image, 300, depth, enable_depth_mask=False)
    analytic = model_flops(PRESETS["vitl14"], 120, 160, num_tokens=300, depth_tokens=None if with_depth else 0)
    assert counter.get_total_flops() == pytest.approx(analytic["total"], rel=0.01)
