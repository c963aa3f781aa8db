"""Test doubles injected through constructors: a clock that only moves when told."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock for tests; call it for the time, `advance` to move it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds
