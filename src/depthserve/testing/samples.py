"""Sample files for tests and benchmarks, encoded the way clients send them."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def png_bytes(array: np.ndarray) -> bytes:
    """Encode an array as PNG (8-bit RGB, or 16-bit grayscale for uint16)."""
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def seeded_image(height: int, width: int, seed: int = 7) -> np.ndarray:
    """A seeded RGB image with gradients and noise, so models see structure."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 4, y * 5, (x + y) * 2], axis=-1) % 256
    return (base + rng.integers(0, 30, base.shape)).clip(0, 255).astype(np.uint8)
