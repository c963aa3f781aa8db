"""Test doubles injected through constructors: a clock that only moves when told."""

from __future__ import annotations

from depthserve.balancer.types import RequestInfo, Snapshot


class FakeClock:
    """A monotonic clock for tests; call it for the time, `advance` to move it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


class FixedOrder:
    """A policy that lists backends in snapshot order, so tests decide which backend is tried first."""

    name = "fixed_order"

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Return the first `limit` backend ids in the snapshot's order."""
        return tuple(view.id for view in snapshot.backends[:limit])
