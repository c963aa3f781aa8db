"""Histogram bucket counts kept by the object that owns the measurement, exported by a collector at scrape time.

Keeping counts next to the state they describe (a backend's stats, a batcher) means backends added later are
covered without registering anything, and the hot path pays one bisect and two additions.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

# Seconds: 0.5 ms to 60 s, roughly x2-x2.5 apart, so p50/p99 of a 5 ms or a 5 s service both resolve.
LATENCY_BOUNDS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
BATCH_SIZE_BOUNDS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class BucketCounts:
    """Counts observations per bucket (upper bounds inclusive, like Prometheus `le`) plus their sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BOUNDS_S) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        """Observations so far."""
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """Give Prometheus buckets: (le, observations <= le), ending with +Inf."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out
