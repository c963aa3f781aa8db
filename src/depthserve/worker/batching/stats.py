"""Measured batch latency curves and arrival rates per batch key, which the adaptive policy plans with."""

from __future__ import annotations

import math
import statistics
from collections import OrderedDict, deque
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class Curve:
    """A batch's service time as a line, t(n) = fixed_s + per_item_s * n, fitted to measured batches."""

    fixed_s: float
    per_item_s: float

    def time(self, n: int) -> float:
        """Predict the service time of a batch of `n` items."""
        return self.fixed_s + self.per_item_s * n


class LatencyCurve:
    """Fits t(n) by exponentially weighted least squares, so the curve follows the device as it warms or slows."""

    def __init__(self, decay: float = 0.95) -> None:
        self._decay = decay
        self._w = self._n = self._t = self._nn = self._nt = 0.0

    def add(self, items: int, seconds: float) -> None:
        """Record one batch of `items` that took `seconds` on the device."""
        d = self._decay
        self._w = self._w * d + 1.0
        self._n = self._n * d + items
        self._t = self._t * d + seconds
        self._nn = self._nn * d + items * items
        self._nt = self._nt * d + items * seconds

    def fit(self) -> Curve | None:
        """Give the fitted line, or None before any batch; one batch size seen means all cost counts as fixed."""
        if self._w == 0:
            return None
        mean_n, mean_t = self._n / self._w, self._t / self._w
        var_n = self._nn / self._w - mean_n * mean_n
        slope = (self._nt / self._w - mean_n * mean_t) / var_n if var_n > 1e-6 * mean_n * mean_n else 0.0
        slope = max(slope, 0.0)  # more items never make a batch faster; noise must not say otherwise
        fixed = mean_t - slope * mean_n
        if fixed < 0:
            return Curve(0.0, mean_t / mean_n)
        return Curve(fixed, slope)


class ArrivalRate:
    """Requests per second as ln 2 / the median of the last `window` gaps, lowered while none arrive.

    For Poisson arrivals that is the rate (their median gap is ln 2 / rate). Unlike a mean, it reads bursts
    (several requests at once, then a pause) as the fast arrivals they are, so the first request of a burst
    can wait for the rest; a mean over the pauses would say that nobody follows it.
    """

    def __init__(self, window: int = 16) -> None:
        self._gaps: deque[float] = deque(maxlen=window)
        self._last: float | None = None

    def add(self, now: float) -> None:
        """Record an arrival."""
        if self._last is not None:
            self._gaps.append(max(now - self._last, 0.0))
        self._last = now

    def rate(self, now: float) -> float:
        """Give arrivals per second; 0.0 until two have been seen."""
        if not self._gaps or self._last is None:
            return 0.0
        return math.log(2) / max(statistics.median(self._gaps), now - self._last, 1e-6)


class BatchStats:
    """Curves and rates per batch key (at most `max_keys`, least recently used dropped), plus one overall curve.

    A key with no measured batch yet borrows the overall curve, so a new image size starts from an estimate.
    """

    def __init__(self, max_keys: int = 256) -> None:
        self._max_keys = max_keys
        self._keys: OrderedDict[Hashable, tuple[LatencyCurve, ArrivalRate]] = OrderedDict()
        self._overall = LatencyCurve()

    def _entry(self, key: Hashable) -> tuple[LatencyCurve, ArrivalRate]:
        entry = self._keys.get(key)
        if entry is None:
            entry = self._keys[key] = (LatencyCurve(), ArrivalRate())
            if len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)
        self._keys.move_to_end(key)
        return entry

    def arrived(self, key: Hashable, now: float) -> None:
        """Record a request of this key entering the queue."""
        self._entry(key)[1].add(now)

    def measured(self, key: Hashable, items: int, seconds: float) -> None:
        """Record a batch of this key that completed whole."""
        self._entry(key)[0].add(items, seconds)
        self._overall.add(items, seconds)

    def curve(self, key: Hashable) -> Curve | None:
        """Give the key's fitted curve, the overall one when the key has none, or None before any batch."""
        entry = self._keys.get(key)
        fitted = entry[0].fit() if entry is not None else None
        return fitted if fitted is not None else self._overall.fit()

    def rate(self, key: Hashable, now: float) -> float:
        """Give the key's arrival rate per second (0.0 when unknown)."""
        entry = self._keys.get(key)
        return entry[1].rate(now) if entry is not None else 0.0
