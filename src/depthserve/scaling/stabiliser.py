"""HPA-like stabilisation: follow a rising recommendation at once, a falling one only after a quiet window.

As Kubernetes' HPA `behavior`: the count never goes below the highest recommendation of the last
`down_window_s` (so a pool is shrunk only after it has wanted fewer workers for that long), nor
above the lowest of the last `up_window_s` (0 = scale up at once). Driven by an explicit `now`, so
the gateway passes its monotonic clock and a simulator its virtual one.
"""

from __future__ import annotations

from collections import deque


class Stabiliser:
    """Turns a stream of recommendations into a worker count that does not flap."""

    def __init__(self, down_window_s: float = 60.0, up_window_s: float = 0.0) -> None:
        if down_window_s < 0 or up_window_s < 0:
            raise ValueError("stabilisation windows must not be negative")
        self.down_window_s = down_window_s
        self.up_window_s = up_window_s
        self._history: deque[tuple[float, int]] = deque()  # (when, recommendation), oldest first
        self.desired: int | None = None  # the last stabilised count

    def update(self, recommendation: int, current: int, now: float) -> int:
        """Record a recommendation made at `now`; give the count to run.

        `current` (the workers running) seeds the first call only, as a recommendation made at `now`
        (a restarted gateway does not shrink a pool before a quiet window of its own); after that the
        count moves from the last desired one, as the HPA moves from the replicas it set, not from
        those already ready, so workers still warming up are not taken back.
        """
        if self._history and now < self._history[-1][0]:
            raise ValueError("time went backwards")
        if self.desired is None:
            self._history.append((now, current))
        self._history.append((now, recommendation))
        horizon = now - max(self.down_window_s, self.up_window_s)
        while self._history and self._history[0][0] < horizon:
            self._history.popleft()
        ceiling = max(r for t, r in self._history if t >= now - self.down_window_s)
        floor = min([recommendation, *(r for t, r in self._history if t > now - self.up_window_s)])
        count = current if self.desired is None else self.desired
        count = max(count, floor)  # scale up to what the whole up-window agreed on
        count = min(count, ceiling)  # scale down only to the highest wish of the down-window
        self.desired = count
        return count
