"""The backend table: owns every Backend, runs their health checks, and hands out snapshots.

The eligible set is derived from health flags (active checks, passive ejection, operator drain);
when too many backends are ejected, ejections are ignored (panic mode) rather than overloading
the rest. Newly ready backends ramp up their weight over `slow_start_s`.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Callable

import grpc

from depthserve.balancer.types import BackendView, Snapshot
from depthserve.gateway.backend import Backend
from depthserve.gateway.backend_slots import SlotQueue
from depthserve.gateway.backend_spec import parse_backend
from depthserve.gateway.backend_stats import BackendStats
from depthserve.gateway.health_checks import HealthChecker
from depthserve.gateway.outlier import OutlierDetector
from depthserve.settings import GatewaySettings

log = logging.getLogger("depthserve.gateway")
SLOW_START_FLOOR = 0.1  # a backend in slow start gets at least this share of its weight


def backend_credentials(settings: GatewaySettings) -> grpc.ChannelCredentials | None:
    """TLS (and, with a client certificate, mutual TLS) to the workers when a CA is configured."""
    if settings.backend_tls_ca is None:
        return None
    cert = settings.backend_tls_cert.read_bytes() if settings.backend_tls_cert else None
    key = settings.backend_tls_key.read_bytes() if settings.backend_tls_key else None
    return grpc.ssl_channel_credentials(settings.backend_tls_ca.read_bytes(), key, cert)


class BackendPool:
    """All backends of the gateway; health checks, outlier detection and operators flip their flags."""

    def __init__(self, settings: GatewaySettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self.clock = clock
        self.backends: dict[str, Backend] = {}
        credentials = backend_credentials(settings)
        for text in settings.backends:
            spec = parse_backend(text, default_auto=settings.auto_weights)
            stats = BackendStats(alpha=settings.ewma_alpha, peak_decay_s=settings.peak_decay_s)
            self.backends[spec.address] = Backend(spec, settings.max_message_mb, stats, credentials)
        self.checker = HealthChecker(settings, clock)
        self.outliers = OutlierDetector(
            settings.consecutive_errors,
            settings.base_ejection_s,
            settings.max_ejection_s,
            settings.max_ejection_percent,
        )
        self.slots = SlotQueue()  # requests waiting for a backend under max_outstanding_per_backend
        self._tasks: list[asyncio.Task[None]] = []

    def weights(self, now: float) -> dict[str, float]:
        """Give each backend's weight: static, or measured capacity (median of known ones if unknown)."""
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

    def _slow_start(self, backend: Backend, now: float) -> float:
        window = self._settings.slow_start_s
        if window <= 0:
            return 1.0
        return max(SLOW_START_FLOOR, min(1.0, (now - backend.health.ready_since) / window))

    def eligible(self, now: float) -> list[Backend]:
        """Backends that may take traffic: healthy and not drained, and not ejected unless in panic."""
        available = [b for b in self.backends.values() if b.health.healthy and not b.health.drained]
        unejected = [b for b in available if not b.health.ejected(now)]
        if available and len(unejected) * 100 < len(available) * self._settings.panic_threshold_percent:
            return available  # panic: too many ejected; spreading load beats overloading the rest
        return unejected

    def snapshot(self) -> Snapshot:
        """Give the eligible backends as immutable views, for a policy to pick from."""
        now = self.clock()
        max_age = self._settings.max_report_age_s
        weights = self.weights(now)
        views = []
        for backend in self.eligible(now):
            stats = backend.stats
            views.append(
                BackendView(
                    backend.address,
                    weight=weights[backend.address] * self._slow_start(backend, now),
                    in_flight=stats.in_flight,
                    ewma_ms=stats.ewma_ms,
                    peak_ewma_ms=stats.peak_at(now),
                    error_rate=stats.error_rate,
                    load=backend.fresh_load(now, max_age),
                )
            )
        return Snapshot(tuple(views), now)

    def record_failure(self, backend: Backend) -> None:
        """Let outlier detection look at a backend after a failure on real traffic."""
        everyone = [b.health for b in self.backends.values()]
        self.outliers.consider(
            backend.address, backend.health, backend.stats.consecutive_errors, everyone, self.clock()
        )

    def set_drained(self, address: str, drained: bool) -> Backend:
        """Stop (or resume) sending new requests to a backend; in-flight ones finish. KeyError if unknown."""
        backend = self.backends[address]
        backend.health.drained = drained
        log.info("backend %s %s by operator", address, "drained" if drained else "undrained")
        return backend

    def describe(self) -> list[dict[str, object]]:
        """Summarise every backend for /v1/cluster."""
        now = self.clock()
        weights = self.weights(now)
        return [b.describe(now, self._settings.max_report_age_s, weights[a]) for a, b in self.backends.items()]

    def ready_count(self) -> int:
        """Count backends that may take traffic now."""
        return len(self.eligible(self.clock()))

    async def start(self) -> None:
        """Check every backend once, then keep checking each in its own task."""
        await asyncio.gather(*(self.checker.check(b) for b in self.backends.values()))
        self._tasks = [asyncio.create_task(self.checker.run(b), name=f"health {a}") for a, b in self.backends.items()]

    async def close(self) -> None:
        """Stop health checks and close every channel."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(b.close() for b in self.backends.values()))
