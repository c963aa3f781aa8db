"""Fixtures shared across the suite: sample files, the tiny reference model, and service checks."""

from __future__ import annotations

import os
import socket
from typing import Any

import numpy as np
import pytest

from depthserve.testing.samples import png_bytes, seeded_image

REQUIRE_SERVICES = os.environ.get("DEPTHSERVE_REQUIRE_SERVICES") == "1"


@pytest.fixture(scope="session")
def rgb() -> np.ndarray:
    """A seeded 48x64 RGB image with structure (not flat noise)."""
    return seeded_image(48, 64)


@pytest.fixture(scope="session")
def rgb_png(rgb: np.ndarray) -> bytes:
    """The sample image encoded as PNG."""
    return png_bytes(rgb)


@pytest.fixture(scope="session")
def raw_depth_mm() -> np.ndarray:
    """A 48x64 raw depth map in millimetres with holes (0) in one corner."""
    depth = np.linspace(800, 4000, 48 * 64, dtype=np.float64).reshape(48, 64).astype(np.uint16)
    depth[:16, :20] = 0
    return depth


@pytest.fixture(scope="session")
def tiny_model() -> Any:
    """The seeded tiny network, as every `--model tiny` worker builds it."""
    from depthserve.model import load_model

    return load_model("tiny", device="cpu")


def service_available(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip with a clear message when a broker is missing, or fail when CI says it must be there."""
    if service_available(host, port):
        return
    message = f"{name} is not reachable at {host}:{port}; start it to run this test"
    if REQUIRE_SERVICES:
        pytest.fail(message + " (DEPTHSERVE_REQUIRE_SERVICES=1)")
    pytest.skip(message)
