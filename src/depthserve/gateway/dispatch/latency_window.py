"""Recent latencies of the pool, for hedging after the p95: a ring buffer with a cached quantile."""

from __future__ import annotations

import numpy as np


class LatencyWindow:
    """Keeps the last `size` successful latencies; the quantile is recomputed every `refresh` samples."""

    def __init__(self, size: int = 512, refresh: int = 64, min_samples: int = 32) -> None:
        self._samples = np.zeros(size, dtype=np.float64)
        self._count = 0
        self._refresh = refresh
        self._min_samples = min_samples
        self._cached: float | None = None
        self._since_refresh = 0

    def add(self, latency_ms: float) -> None:
        """Record one latency."""
        self._samples[self._count % len(self._samples)] = latency_ms
        self._count += 1
        self._since_refresh += 1

    def p95(self) -> float | None:
        """The 95th percentile of the window, or None until enough samples exist."""
        filled = min(self._count, len(self._samples))
        if filled < self._min_samples:
            return None
        if self._cached is None or self._since_refresh >= self._refresh:
            self._cached = float(np.percentile(self._samples[:filled], 95))
            self._since_refresh = 0
        return self._cached
