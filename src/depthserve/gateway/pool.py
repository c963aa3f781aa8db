"""The backend table: owns every Backend, keeps their health current, and hands out snapshots."""

from __future__ import annotations

import asyncio
import logging
import random
import statistics
import time
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2

from depthserve.balancer.types import BackendView, Snapshot
from depthserve.gateway.backend import READY, UNREADY, Backend
from depthserve.gateway.backend_spec import parse_backend
from depthserve.gateway.backend_stats import BackendStats
from depthserve.settings import GatewaySettings

log = logging.getLogger("depthserve.gateway")


class BackendPool:
    """All backends of the gateway; the health task is the only writer of their state."""

    def __init__(self, settings: GatewaySettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self.clock = clock
        self.backends: dict[str, Backend] = {}
        for text in settings.backends:
            spec = parse_backend(text, default_auto=settings.auto_weights)
            stats = BackendStats(alpha=settings.ewma_alpha, peak_decay_s=settings.peak_decay_s)
            self.backends[spec.address] = Backend(spec, settings.max_message_mb, stats)
        self._task: asyncio.Task[None] | None = None

    def weights(self, now: float) -> dict[str, float]:
        """Give each backend's effective weight: static, or its measured capacity (median of known ones if unknown)."""
        max_age = self._settings.max_report_age_s
        measured = {}
        for backend in self.backends.values():
            load = backend.fresh_load(now, max_age)
            if backend.spec.auto and load is not None and load.capacity_rps > 0:
                measured[backend.address] = load.capacity_rps
        fallback = statistics.median(measured.values()) if measured else 1.0
        return {
            address: backend.spec.weight if backend.spec.weight is not None else measured.get(address, fallback)
            for address, backend in self.backends.items()
        }

    def snapshot(self) -> Snapshot:
        """Give the ready backends as immutable views, for a policy to pick from."""
        now = self.clock()
        max_age = self._settings.max_report_age_s
        has_auto = any(b.spec.auto for b in self.backends.values())
        weights = self.weights(now) if has_auto else None
        views = []
        for backend in self.backends.values():
            if backend.state != READY:
                continue
            stats = backend.stats
            weight = weights[backend.address] if weights is not None else (backend.spec.weight or 1.0)
            views.append(
                BackendView(
                    backend.address,
                    weight=weight,
                    in_flight=stats.in_flight,
                    ewma_ms=stats.ewma_ms,
                    peak_ewma_ms=stats.peak_at(now),
                    error_rate=stats.error_rate,
                    load=backend.fresh_load(now, max_age),
                )
            )
        return Snapshot(tuple(views), now)

    def describe(self) -> list[dict[str, object]]:
        """Summarise every backend for /v1/cluster."""
        now = self.clock()
        weights = self.weights(now)
        return [b.describe(now, self._settings.max_report_age_s, weights[a]) for a, b in self.backends.items()]

    def ready_count(self) -> int:
        """Count backends currently ready."""
        return sum(1 for b in self.backends.values() if b.state == READY)

    async def check(self, backend: Backend) -> None:
        """Ask one backend's gRPC health service and set its state from the answer."""
        try:
            reply = await backend.health.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=self._settings.health_timeout_s
            )
            serving = reply.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.aio.AioRpcError:
            serving = False
        state = READY if serving else UNREADY
        if state != backend.state:
            log.info("backend %s is now %s", backend.address, state)
        backend.state = state

    async def _health_loop(self) -> None:
        interval = self._settings.health_interval_s
        while True:
            await asyncio.gather(*(self.check(b) for b in self.backends.values()))
            await asyncio.sleep(interval * random.uniform(0.8, 1.2))

    async def start(self) -> None:
        """Check every backend once, then keep checking in the background."""
        await asyncio.gather(*(self.check(b) for b in self.backends.values()))
        self._task = asyncio.create_task(self._health_loop(), name="health-checks")

    async def close(self) -> None:
        """Stop health checks and close every channel."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*(b.close() for b in self.backends.values()))
