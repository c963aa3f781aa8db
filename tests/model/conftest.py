"""Shared fixtures: the seeded tiny network and small RGB-D samples with varied holes."""

from __future__ import annotations

import pytest
import torch

from depthserve.model import LingBotDepth, load_model

HEIGHT, WIDTH = 60, 80


@pytest.fixture(scope="session")
def tiny() -> LingBotDepth:
    """The seed-0 `tiny` preset every test and worker gets."""
    return load_model("tiny")


@pytest.fixture()
def samples() -> tuple[torch.Tensor, torch.Tensor]:
    """Four RGB-D samples: all-zero (monocular), full, half NaN/inf, bottom rows missing."""
    g = torch.Generator().manual_seed(7)
    image = torch.rand(4, 3, HEIGHT, WIDTH, generator=g)
    depth = torch.rand(4, HEIGHT, WIDTH, generator=g) * 4 + 0.3
    depth[0] = 0.0
    depth[2, :, WIDTH // 2 :] = float("nan")
    depth[2, : HEIGHT // 3, WIDTH // 2 :] = float("inf")
    depth[3, HEIGHT // 2 :] = 0.0
    return image, depth
