"""Requests a hash policy binds to one backend: their slots and recent releases per backend (a lane).

Under a hash policy each client's requests go to one backend whatever the load, so the pool-wide cap and
wait estimate say little about a bound request's turn: when the hash sends one worker more than it runs,
that worker's surplus fills the model's slots and the idle workers beside it would wait with it, and its
clients, served at that worker's rate alone, would be promised the whole pool's. Admission keeps, per
(model, backend), the slots its bound requests hold and when they ended: a bound request whose backend has
room gets in, model cap or not, and one that must wait is estimated by its backend's pace.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Sequence

RATE_WINDOW = 64  # recent releases that estimate how fast a queue drains
Lane = tuple[str, str]  # (model, backend address)


def events_per_second(times: Sequence[float]) -> float | None:
    """Events per second over a window of timestamps, or None with too few to say."""
    if len(times) < 4:
        return None
    span_s = times[-1] - times[0]
    return (len(times) - 1) / span_s if span_s > 0 else None


class Lanes:
    """Per lane, the regular slots its requests hold (express ones are counted apart) and its last releases."""

    def __init__(self, capacity: Callable[[str], int | None] | None = None) -> None:
        self._capacity = capacity  # backend -> requests it holds without a long queue (None: unknown)
        self.in_flight: Counter[Lane] = Counter()
        self._releases: dict[Lane, deque[float]] = {}

    def cap(self, backend: str) -> int | None:
        """The slots a backend's bound requests may hold, or None when its capacity is unknown."""
        return None if self._capacity is None else self._capacity(backend)

    def take(self, lane: Lane) -> None:
        """Count a regular slot taken by a request bound to `lane`."""
        self.in_flight[lane] += 1

    def give_back(self, lane: Lane, now: float, regular: bool) -> None:
        """Note a bound request's end at `now`, giving back its slot when it held a regular one."""
        if regular:
            left = self.in_flight[lane] - 1
            if left:
                self.in_flight[lane] = left
            else:
                del self.in_flight[lane]  # backends come and go: keep only lanes in use
        releases = self._releases.get(lane)
        if releases is None:
            releases = self._releases[lane] = deque(maxlen=RATE_WINDOW)
        releases.append(now)

    def rate(self, lane: Lane) -> float | None:
        """Requests a second the lane's backend has been ending lately, or None with too few to say."""
        return events_per_second(self._releases.get(lane, ()))

    def prune(self, before: float) -> None:
        """Forget the release times of lanes idle since `before` that hold nothing: memory stays bounded."""
        idle = [lane for lane, times in self._releases.items() if times[-1] < before and lane not in self.in_flight]
        for lane in idle:
            del self._releases[lane]
