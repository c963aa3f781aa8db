"""The last few minutes of request rate and latency quantiles, for the live dashboard (no Prometheus needed).

Each second gets a fixed set of fine log-spaced buckets; observing is a bisect and an increment, and
quantiles are estimated from the buckets only when someone asks (like PromQL's histogram_quantile).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable

# 0.1 ms .. ~100 s in steps of x1.15: a quantile is off by at most ~7%.
_BOUNDS = tuple(0.0001 * 1.15**i for i in range(100))


class _Second:
    __slots__ = ("at", "counts", "errors", "requests")

    def __init__(self, at: int) -> None:
        self.at = at
        self.requests = 0
        self.errors = 0
        self.counts = [0] * (len(_BOUNDS) + 1)


def _quantile(counts: list[int], total: int, q: float) -> float:
    """Estimate a quantile from bucket counts by linear interpolation inside the bucket."""
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            low = _BOUNDS[index - 1] if index > 0 else 0.0
            high = _BOUNDS[index] if index < len(_BOUNDS) else _BOUNDS[-1]
            return low + (high - low) * ((rank - seen) / count)
        seen += count
    return _BOUNDS[-1]


class RequestHistory:
    """Per-second request counts, errors and latency buckets over the last `seconds` seconds."""

    def __init__(self, seconds: int = 300, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._done: deque[_Second] = deque(maxlen=seconds)
        self._current = _Second(int(clock()))

    def _roll(self, now: int) -> _Second:
        current = self._current
        if now != current.at:
            self._done.append(current)
            gap = min(now - current.at - 1, self._done.maxlen or 0)
            for at in range(now - gap, now):  # seconds with no request at all are zeros, not gaps
                self._done.append(_Second(at))
            current = self._current = _Second(now)
        return current

    def observe(self, seconds: float, error: bool) -> None:
        """Count one finished request and its latency."""
        current = self._roll(int(self._clock()))
        current.requests += 1
        current.errors += error
        current.counts[bisect_left(_BOUNDS, seconds)] += 1

    def export(self) -> list[list[int]]:
        """The completed seconds as [at, requests, errors, *counts] rows, to merge with another process's."""
        self._roll(int(self._clock()))
        return [[s.at, s.requests, s.errors, *s.counts] for s in self._done]

    def combined(self, others: list[list[list[int]]]) -> RequestHistory:
        """A new history of this one's seconds plus other processes' exported ones (this one is not changed)."""
        self._roll(int(self._clock()))
        merged = RequestHistory(self._done.maxlen or 300, self._clock)
        merged._current = _Second(self._current.at)
        by_time: dict[int, _Second] = {}
        for mine in self._done:
            second = by_time[mine.at] = _Second(mine.at)
            second.requests, second.errors, second.counts = mine.requests, mine.errors, list(mine.counts)
            merged._done.append(second)
        for rows in others:
            for at, requests, errors, *counts in rows:
                known = by_time.get(at)
                if known is None or len(counts) != len(known.counts):
                    continue  # older than this history keeps, or from a build with other buckets
                known.requests += requests
                known.errors += errors
                known.counts = [a + b for a, b in zip(known.counts, counts, strict=True)]
        return merged

    def series(self, window_s: int = 5) -> dict[str, object]:
        """Give completed seconds grouped by `window_s`: time, QPS, error rate and p50/p95/p99 in milliseconds."""
        self._roll(int(self._clock()))
        seconds = list(self._done)
        points: list[dict[str, float | None]] = []
        ends = range(len(seconds), 0, -window_s)  # windows end at the newest second; the oldest may be shorter
        for end in reversed(ends):
            group = seconds[max(0, end - window_s) : end]
            total = sum(s.requests for s in group)
            counts = [sum(col) for col in zip(*(s.counts for s in group), strict=True)]
            point: dict[str, float | None] = {
                "t": float(group[-1].at + 1),
                "qps": total / len(group),
                "errors_per_s": sum(s.errors for s in group) / len(group),
            }
            for name, q in (("p50_ms", 0.5), ("p95_ms", 0.95), ("p99_ms", 0.99)):
                point[name] = None if total == 0 else round(_quantile(counts, total, q) * 1000.0, 3)
            points.append(point)
        return {"window_s": window_s, "points": points}
