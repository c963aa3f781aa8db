"""The gateway's request and reply buffer budgets from settings, by default a stated share of the machine's memory.

Without these, 256 admitted 32 MiB uploads (or a few clients that never read 16 MiB replies) could
hold several GB; with them the bodies and replies held at once stay under
`REQUEST_MEMORY_SHARE` + `REPLY_MEMORY_SHARE` of memory (each body is held once, plus a brief second
copy while it is turned into the gRPC message).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from depthserve.gateway.config import EdgeConfig
from depthserve.gateway.edge.reply_budget import ReplyBudget
from depthserve.gateway.edge.upload_budget import UploadBudget

REQUEST_MEMORY_SHARE = 1 / 8  # default total of request bodies held, as a share of memory
REPLY_MEMORY_SHARE = 1 / 8  # default total of unread reply bytes held, as a share of memory
MIB = 1024 * 1024
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def machine_memory() -> int:
    """Bytes of memory this process may use: physical memory, or a smaller cgroup (container) limit."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _bytes(mb: float | None, share: float) -> int:
    return int(mb * MIB) if mb is not None else max(MIB, int(machine_memory() * share))


def upload_budget(settings: EdgeConfig, processes: int = 1) -> UploadBudget:
    """The per-client and total budget of request bodies (the total split between the gateway's processes)."""
    return UploadBudget(
        max(1, _bytes(settings.max_request_memory_mb, REQUEST_MEMORY_SHARE) // processes),
        int(settings.client_request_memory_mb * MIB),
        settings.client_uploads,
    )


def reply_budget(settings: EdgeConfig, processes: int = 1) -> ReplyBudget:
    """The per-connection, per-address and total budget of replies being written, and their write timeout.

    The total is split between the gateway's processes, so the gateway as a whole holds no more.
    """
    return ReplyBudget(
        max(1, _bytes(settings.max_reply_memory_mb, REPLY_MEMORY_SHARE) // processes),
        int(settings.connection_reply_memory_mb * MIB),
        settings.reply_write_timeout_s,
        int(settings.client_reply_memory_mb * MIB),
    )


def buffer_metrics(uploads: UploadBudget, replies: ReplyBudget) -> Iterator[Metric]:
    """Scrape-time gauges of the bytes both budgets hold, and the replies abandoned by clients that stopped reading."""
    yield GaugeMetricFamily(
        "depthserve_gateway_request_bytes_held", "Request body bytes held in the gateway now.", uploads.held
    )
    yield GaugeMetricFamily("depthserve_gateway_uploads", "Request bodies still arriving now.", uploads.uploading)
    yield GaugeMetricFamily(
        "depthserve_gateway_reply_bytes_held",
        "Reply bytes held for clients that have not read them yet (abandoned replies' remains included).",
        replies.held,
    )
    yield CounterMetricFamily(
        "depthserve_gateway_replies_abandoned",
        "Replies cut short because the client read none of them for reply_write_timeout_s.",
        replies.abandoned,
    )
