"""A turbo colour map computed with numpy, so previews need no matplotlib."""

from __future__ import annotations

import numpy as np

# Polynomial fit of Google's Turbo map (Mikhailo, 2019, Apache-2.0), coefficients for
# 1, x, x^2, x^3, x^4, x^5 per channel. Turbo runs dark blue (0) -> red (1).
_COEFFS = np.array(
    [
        [0.13572138, 4.61539260, -42.66032258, 132.13108234, -152.94239396, 59.28637943],
        [0.09140261, 2.19418839, 4.84296658, -14.18503333, 4.27729857, 2.82956604],
        [0.10667330, 12.64194608, -60.58204836, 110.36276771, -89.90310912, 27.34824973],
    ]
)


# The fit's first few percent are nearly black; skipping them keeps far pixels from looking like holes.
_START = 0.06


def _turbo_lut() -> np.ndarray:
    """Tabulate turbo at 256 levels once, so colouring an image is a single gather."""
    x = np.linspace(_START, 1.0, 256)
    powers = np.stack([x**i for i in range(6)])  # 6 x 256
    rgb = (_COEFFS @ powers).T  # 256 x 3
    return np.clip(np.rint(rgb * 255.0), 0, 255).astype(np.uint8)


TURBO_LUT = _turbo_lut()
