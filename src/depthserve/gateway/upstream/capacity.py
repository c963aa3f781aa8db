"""How much more work a model's pool can queue, read from the workers' load reports.

The dispatcher skips a backend whose report says its queue is full instead of sending it work it
would refuse (RESOURCE_EXHAUSTED). A worker's room is its queue limit minus its queue when it wrote
its last report, minus the calls this gateway sent it since. Admission caps a model's in-flight
requests at what its workers run at once plus one batch waiting each, so under overload surplus
waits in the gateway's fair queue, not in a worker's. A backend without a fresh report (a fresh
gateway, an idle backend, an older worker) has unknown room, which never counts as full; a backend
that never reported has unknown concurrency, which caps nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from depthserve.gateway.upstream.backend import Backend


def backend_room(backend: Backend, now: float, max_age_s: float) -> int | None:
    """Requests the backend's queue can still take, or None when no fresh report says."""
    load = backend.fresh_load(now, max_age_s)
    room = None if load is None else load.room()
    return None if room is None else max(0, room - backend.stats.sent_since_report)


def known_full(backend: Backend, now: float, max_age_s: float) -> bool:
    """Whether a fresh report says the backend's queue has no room (unknown is not full).

    `backend_room(...) == 0`, written out: it is asked for every candidate of every request.
    """
    load = backend.load
    if load is None or now - backend.load_at > max_age_s:
        return False
    room = load.room()
    return room is not None and room <= backend.stats.sent_since_report


def backend_concurrency(backend: Backend) -> int | None:
    """Requests the backend runs at once plus one batch waiting, by its last report; None before any.

    A worker's batch size and concurrency are its configuration, so an old report still tells them
    (unlike its queue): a burst after a quiet spell is not let through uncapped.
    """
    load = backend.load
    if load is None:
        return None
    batch = max(1, load.max_batch)
    return max(batch, load.slots) + batch


def pool_concurrency(backends: Iterable[Backend]) -> int | None:
    """The requests a pool holds without a long worker queue; None when any backend is unknown (or none)."""
    total = 0
    counted = False
    for backend in backends:
        held = backend_concurrency(backend)
        if held is None:
            return None
        total += held
        counted = True
    return total if counted else None
