"""How much more work a model's pool can queue, read from the workers' load reports.

Admission refuses at the door when every backend of a pool says its queue is full, instead of
sending work that full workers refuse (RESOURCE_EXHAUSTED) and retrying it on other full workers.
A worker's room is its queue limit minus its queue when it wrote its last report, minus the calls
this gateway sent it since. A backend without a fresh report (a fresh gateway, an idle backend, an
older worker that reports no limit) has unknown room, which never counts as full.
"""

from __future__ import annotations

from collections.abc import Iterable

from depthserve.gateway.backend import Backend


def backend_room(backend: Backend, now: float, max_age_s: float) -> int | None:
    """Requests the backend's queue can still take, or None when no fresh report says."""
    load = backend.fresh_load(now, max_age_s)
    room = None if load is None else load.room()
    return None if room is None else max(0, room - backend.stats.sent_since_report)


def known_full(backend: Backend, now: float, max_age_s: float) -> bool:
    """Whether a fresh report says the backend's queue has no room (unknown is not full)."""
    return backend_room(backend, now, max_age_s) == 0


def pool_room(backends: Iterable[Backend], now: float, max_age_s: float) -> int | None:
    """Room summed over a pool's eligible backends; None when any of them is unknown (or there are none)."""
    total = 0
    counted = False
    for backend in backends:
        room = backend_room(backend, now, max_age_s)
        if room is None:
            return None
        total += room
        counted = True
    return total if counted else None
