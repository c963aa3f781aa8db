"""Least expected latency (Finagle-style peak-EWMA cost): steer away from a backend as soon as it turns slow."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.common import Options, Rotation, fill_median, latency_ms, scan_or_sample
from depthserve.balancer.types import RequestInfo, Snapshot

MAX_ERROR_RATE = 0.99  # keeps a failing backend's cost finite, so it still ranks as a last resort


class LeastLatency:
    """Orders backends by latency x (in_flight + 1) / weight, inflated by expected retries for error rate.

    The latency is peak-EWMA by default (`metric`: `peak_ewma` or `ewma`; peak-EWMA falls back to EWMA when the
    gateway has no peak). A backend with no sample yet is costed at the median of the known latencies:
    optimistic enough to be tried, not so optimistic (zero) that it soaks up every request. With
    `error_penalty` p > 0 the cost is multiplied by 1 + p * e / (1 - e) for error rate e (p = 1: the expected
    attempts per success), because a backend that fails fast would otherwise look fastest. Ties rotate.
    A pool larger than FULL_SCAN is costed on a random sample of that size when only a few candidates are
    wanted (as least_connections).
    """

    name: ClassVar[str] = "least_latency"

    def __init__(self, metric: str = "peak_ewma", error_penalty: float = 1.0, seed: int | None = None) -> None:
        self._metric = metric
        self._error_penalty = error_penalty
        self._rotation = Rotation()
        self._rng = random.Random(seed)

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> LeastLatency:
        """Read `metric` (peak_ewma | ewma) and `error_penalty` (default 1.0, clamped to 0..100)."""
        parse = Options(cls.name, options)
        metric = parse.choice("metric", "peak_ewma", ("peak_ewma", "ewma"))
        error_penalty = parse.number("error_penalty", 1.0, 0.0, 100.0, clamp=True)
        parse.done()
        return cls(metric, error_penalty, seed)

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Cost the backends (or a sample of a large pool) and sort, cheapest first."""
        table = snapshot.table
        indices = scan_or_sample(self._rng, len(table.serving), limit)
        serving, weights = table.serving, table.weights
        latency = fill_median([latency_ms(serving[i], self._metric) for i in indices])
        cost = []
        for i, ms in zip(indices, latency, strict=True):
            backend = serving[i]
            value = ms * (max(backend.in_flight, 0) + 1) / weights[i]
            if self._error_penalty and backend.error_rate > 0:
                errors = min(backend.error_rate, MAX_ERROR_RATE)
                value *= 1.0 + self._error_penalty * errors / (1.0 - errors)
            cost.append(value)
        return self._rotation.cheapest_first(table, indices, cost, limit)
