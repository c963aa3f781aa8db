"""Round robin: each request goes to the next backend in turn, blind to load (the baseline)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from depthserve.balancer.types import RequestInfo, Snapshot


class RoundRobin:
    """Cycles through the eligible backends; fallbacks follow in the same cyclic order."""

    name: ClassVar[str] = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> RoundRobin:
        """Round robin takes no options."""
        if options:
            raise ValueError(f"round_robin takes no options, got {sorted(options)}")
        return cls()

    def pick(self, snapshot: Snapshot, request: RequestInfo) -> tuple[str, ...]:
        """Start at the next position of the cycle and list every backend from there."""
        ids = [backend.id for backend in snapshot.backends]
        if not ids:
            return ()
        start = self._next % len(ids)
        self._next = start + 1
        return tuple(ids[start:] + ids[:start])
