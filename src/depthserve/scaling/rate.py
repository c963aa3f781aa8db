"""A rate over a sliding window, from samples of a growing total (served requests) and an explicit `now`."""

from __future__ import annotations

from collections import deque


class RateMeter:
    """Events per second over the last `window_s`, fed with (now, running total) samples.

    A total that falls (a counter reset: backends removed) restarts the window rather than giving a
    negative rate.
    """

    def __init__(self, window_s: float = 5.0) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque()

    def observe(self, now: float, total: float) -> float:
        """Record the total at `now` and give the rate over the window (0 until two samples span time)."""
        if self._samples and total < self._samples[-1][1]:
            self._samples.clear()
        self._samples.append((now, total))
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.window_s:
            self._samples.popleft()  # keep one sample at or before the window's start, so it spans the window
        first_t, first_total = self._samples[0]
        span = now - first_t
        return (total - first_total) / span if span > 0 else 0.0
