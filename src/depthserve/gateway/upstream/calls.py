"""One call's claim on a backend, settled exactly once (grpc-go's PickResult.Done).

The pool hands out a `Call` when a request is sent to a backend: its in-flight count goes up at once,
so requests choosing in the same instant see it. Whatever way the call ends (a reply, a failure, a
cancelled hedge, a task cancelled before it ran), the first of `ok`, `failed` or `abandoned` settles
it and the rest do nothing: stats, load report, outlier detection, the freed slot and the outcome
listeners are updated in one place.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from depthserve.gateway.upstream.backend import Backend
from depthserve.protocol.load_report import LoadReport

if TYPE_CHECKING:
    from depthserve.gateway.upstream.pool import BackendPool


class Outcome(enum.Enum):
    """How a call ended, for the backend's stats."""

    OK = "ok"  # a result: a latency sample
    FAILED = "failed"  # the backend's fault: counts towards ejection
    ABANDONED = "abandoned"  # neither (a cancelled hedge, a client error, a refusal for load): no sample


class Call:
    """A call in flight on `backend`, from `started_at` (the pool's clock)."""

    __slots__ = ("backend", "started_at", "_pool", "outcome")

    def __init__(self, pool: BackendPool, backend: Backend, started_at: float) -> None:
        self.backend = backend
        self.started_at = started_at
        self._pool = pool
        self.outcome: Outcome | None = None

    def report(self, load: LoadReport | None) -> None:
        """Keep a load report that came back before the call is settled."""
        if load is not None:
            self._pool.record_load(self.backend, load)

    def ok(self, load: LoadReport | None = None) -> None:
        """The backend answered with a result."""
        self._settle(Outcome.OK, load)

    def failed(self, load: LoadReport | None = None) -> None:
        """The call failed through the backend's fault."""
        self._settle(Outcome.FAILED, load)

    def abandoned(self, load: LoadReport | None = None) -> None:
        """The call ended without a result that is not the backend's fault."""
        self._settle(Outcome.ABANDONED, load)

    def _settle(self, outcome: Outcome, load: LoadReport | None) -> None:
        if self.outcome is not None:
            return
        self.outcome = outcome
        self.report(load)
        self._pool.settle(self)

    def __enter__(self) -> Call:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abandoned()  # a call used for metadata: counted in flight, never a latency sample
