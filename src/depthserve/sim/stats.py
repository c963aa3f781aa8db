"""What a run measured, in bounded memory: a latency sketch, counters, and a per-second timeline.

No per-request record is kept: latencies go into a log-bucketed sketch (1% relative error, the
idea of DDSketch), so a run of millions of requests costs a few kilobytes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

GAMMA = 1.02  # bucket i holds latencies in (GAMMA^(i-1), GAMMA^i] milliseconds: ~1% relative error
_LOG_GAMMA = math.log(GAMMA)


def bucket_of(ms: float) -> int:
    """The sketch bucket of a latency in milliseconds."""
    return math.ceil(math.log(max(ms, 1e-3)) / _LOG_GAMMA)


@dataclass
class Sketch:
    """Counts of latencies (ms) in logarithmic buckets; quantiles within ~1%."""

    buckets: Counter[int] = field(default_factory=Counter)
    count: int = 0

    def add(self, ms: float) -> None:
        """Count one latency."""
        self.add_to(bucket_of(ms))

    def add_to(self, bucket: int) -> None:
        """Count one latency already bucketed (one log per reply, though it goes into two sketches)."""
        self.buckets[bucket] += 1
        self.count += 1

    def merge(self, other: Sketch) -> None:
        """Add another sketch's counts."""
        self.buckets.update(other.buckets)
        self.count += other.count

    def quantile(self, q: float) -> float | None:
        """The latency below which a share `q` of the counted ones lie (None when empty)."""
        if not self.count:
            return None
        rank = q * self.count
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                return float(GAMMA ** (index - 1) * (1 + GAMMA) / 2)  # the bucket's middle
        return float(GAMMA ** max(self.buckets))


@dataclass
class Second:
    """One second of the timeline."""

    ok: int = 0
    failed: int = 0
    latency: Sketch = field(default_factory=Sketch)


@dataclass
class RunStats:
    """One policy at one load: every request accounted for, as answered or failed with its reason."""

    sent: int = 0
    ok: int = 0
    within_slo: int = 0
    failed: Counter[str] = field(default_factory=Counter)  # "503 pool_full", "504 deadline", ...
    latency: Sketch = field(default_factory=Sketch)
    timeline: dict[int, Second] = field(default_factory=dict)

    def answered(self, at: float, ms: float, slo_ms: float, counted: bool) -> None:
        """A reply `ms` after the request was sent at `at` (`counted`: past the warm-up)."""
        second = self._second(at)
        second.ok += 1
        bucket = bucket_of(ms)
        second.latency.add_to(bucket)
        if counted:
            self.ok += 1
            self.latency.add_to(bucket)
            if ms <= slo_ms:
                self.within_slo += 1

    def refused(self, at: float, reason: str, counted: bool) -> None:
        """A request that ended in an error status."""
        self._second(at).failed += 1
        if counted:
            self.failed[reason] += 1

    def _second(self, at: float) -> Second:
        """The timeline's second of `at`, made on first use (not a new one built and dropped per request)."""
        key = int(at)
        second = self.timeline.get(key)
        if second is None:
            second = self.timeline[key] = Second()
        return second

    @property
    def failures(self) -> int:
        """Requests that got an error."""
        return sum(self.failed.values())
