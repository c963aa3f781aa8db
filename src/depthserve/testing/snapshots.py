"""Builders for balancer snapshots, so policy tests and the simulator state only what they vary."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from depthserve.balancer.types import BackendView, RequestInfo, Snapshot
from depthserve.protocol.load_report import LoadReport

GPU_MEMORY = 80 * 2**30  # bytes; a report's memory fraction is given relative to this


def report(
    queue: int = 0, running: int = 0, util: float = 0.0, mem: float = 0.1, temp: float = 50.0, max_batch: int = 8
) -> LoadReport:
    """Build a load report with memory as a fraction of an 80 GiB accelerator."""
    return LoadReport(
        queue=queue,
        running=running,
        max_batch=max_batch,
        gpu_util=util,
        device="cuda",
        mem_used=int(mem * GPU_MEMORY),
        mem_total=GPU_MEMORY,
        temp_c=temp,
    )


def snapshot(*backends: BackendView | str, now: float = 0.0) -> Snapshot:
    """Build a snapshot; a plain string stands for a default backend with that id."""
    return Snapshot(tuple(BackendView(b) if isinstance(b, str) else b for b in backends), now)


def pool(count: int, prefix: str = "w", **fields: Any) -> Snapshot:
    """Build a snapshot of `count` identical backends named w0, w1, ..."""
    return Snapshot(tuple(BackendView(f"{prefix}{i}", **fields) for i in range(count)))


def update(snap: Snapshot, backend_id: str, **fields: Any) -> Snapshot:
    """Return the snapshot with one backend's fields changed."""
    views = [b for b in snap.backends if isinstance(b, BackendView)]
    return Snapshot(tuple(replace(b, **fields) if b.id == backend_id else b for b in views), snap.now)


def request(session: str | None = None, client: str = "", **headers: str) -> RequestInfo:
    """Build a request, with `session` as its x-session-id header when given."""
    names = {k.replace("_", "-").lower(): v for k, v in headers.items()}
    if session is not None:
        names["x-session-id"] = session
    return RequestInfo("depth", names, client)
