"""The backend table: owns every Backend, runs their health checks, and hands out snapshots.

The eligible set is derived from health flags (active checks, passive ejection, operator drain);
when too many backends are ejected, ejections are ignored (panic mode) rather than overloading
the rest. Newly ready backends ramp up their weight over `slow_start_s`.

Membership changes at run time: discovery calls `add` and `remove` (a removed backend takes no new
requests and its channel closes once its in-flight requests are done). Each backend is tagged with
the model and version it serves; `snapshot_for` gives one model's (and version's) pool.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import Callable

import grpc

from depthserve.balancer.types import BackendView, RequestInfo, Snapshot
from depthserve.discovery.backend_spec import BackendSpec, parse_backend
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.upstream.backend import Backend
from depthserve.gateway.upstream.backend_slots import SlotQueue
from depthserve.gateway.upstream.backend_stats import BackendStats
from depthserve.gateway.upstream.capacity import known_full, pool_concurrency
from depthserve.gateway.upstream.health_checks import HealthChecker
from depthserve.gateway.upstream.outlier import OutlierDetector
from depthserve.gateway.upstream.version_split import VersionSplitter
from depthserve.settings import GatewaySettings

log = logging.getLogger("depthserve.gateway")
SLOW_START_FLOOR = 0.1  # a backend in slow start gets at least this share of its weight
RETIRE_POLL_S = 0.05  # how often a removed backend is checked for in-flight requests left


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
        self._credentials = backend_credentials(settings)
        self._checks: dict[str, asyncio.Task[None]] = {}  # one health-check task per backend, once started
        self._retiring: set[asyncio.Task[None]] = set()
        self._started = False
        self.routes = VersionSplitter.from_config(settings.versions, settings.version_seed)
        for text in settings.backends:
            self.add(parse_backend(text, default_auto=settings.auto_weights))
        self.checker = HealthChecker(settings, clock, on_stall=self._stalled)
        self.outliers = OutlierDetector(
            settings.consecutive_errors,
            settings.base_ejection_s,
            settings.max_ejection_s,
            settings.max_ejection_percent,
        )
        self.slots = SlotQueue()  # requests waiting for a backend under max_outstanding_per_backend
        self.removal_listeners: list[Callable[[str], None]] = []  # told the address of each backend removed
        self.stall_listeners: list[Callable[[str], None]] = []  # told the address of a backend that stopped answering

    def add(self, spec: BackendSpec) -> Backend:
        """Add a backend (checked before it takes traffic), or update the tags and weight of a known one."""
        backend = self.backends.get(spec.address)
        if backend is None:
            stats = BackendStats(alpha=self._settings.ewma_alpha, peak_decay_s=self._settings.peak_decay_s)
            backend = Backend(spec, self._settings.max_message_mb, stats, self._credentials)
            self.backends[spec.address] = backend
            log.info("backend %s added (%s, model %s, version %s)", spec.address, spec.source, spec.model, spec.version)
        elif backend.spec != spec or backend.leaving:
            log.info("backend %s updated (%s)", spec.address, spec)
            backend.spec = spec
            backend.leaving = False
        if self._started and spec.address not in self._checks:
            self._checks[spec.address] = asyncio.create_task(self.checker.run(backend), name=f"health {spec.address}")
        return backend

    def remove(self, address: str) -> None:
        """Take a backend out: no new requests at once; its channel closes after its in-flight ones finish."""
        backend = self.backends.get(address)
        if backend is None or backend.leaving:
            return
        backend.leaving = True
        check = self._checks.pop(address, None)
        if check is not None:
            check.cancel()
        log.info("backend %s leaving (%d in flight)", address, backend.stats.in_flight)
        task = asyncio.create_task(self._retire(backend), name=f"retire {address}")
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire(self, backend: Backend) -> None:
        """Close a leaving backend once nothing is in flight there (or the longest request deadline passed)."""
        give_up = self.clock() + self._settings.max_request_timeout_s
        while backend.stats.in_flight > 0 and self.clock() < give_up and backend.leaving:
            await asyncio.sleep(RETIRE_POLL_S)
        if not backend.leaving or self.backends.get(backend.address) is not backend:
            return  # added back meanwhile: it stays
        del self.backends[backend.address]
        self.checker.forget(backend.address)
        for listener in self.removal_listeners:
            listener(backend.address)
        await backend.close()
        log.info("backend %s removed", backend.address)

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

    def eligible(self, now: float, model: str | None = None, version: str | None = None) -> list[Backend]:
        """Backends that may take traffic: healthy and not drained, and not ejected unless in panic.

        With `model` (and `version`), only that pool's backends, and panic is judged within the pool.
        """
        available = [
            b
            for b in self.backends.values()
            if b.health.healthy
            and not b.health.drained
            and not b.leaving
            and (model is None or b.spec.serves(model, version))
        ]
        unejected = [b for b in available if not b.health.ejected(now)]
        if available and len(unejected) * 100 < len(available) * self._settings.panic_threshold_percent:
            return available  # panic: too many ejected; spreading load beats overloading the rest
        return unejected

    def snapshot(self, model: str | None = None, version: str | None = None) -> Snapshot:
        """Give the eligible backends (of one model's pool, when given) as immutable views for a policy."""
        now = self.clock()
        max_age = self._settings.max_report_age_s
        weights = self.weights(now)
        views = []
        for backend in self.eligible(now, model, version):
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

    def snapshot_for(self, request: RequestInfo) -> Snapshot:
        """Give the pool a request goes to: its model, and the version it names or the split chooses.

        Raises a 404 GatewayError when no backend at all serves the model or the version named.
        """
        # Leaving backends still make a model known: while all of them drain it is a 503, not a 404.
        members = [b for b in self.backends.values() if b.spec.serves(request.model)]
        if not members:
            if self.backends:
                known = sorted({b.spec.model for b in self.backends.values() if b.spec.model})
                raise GatewayError(404, "unknown_model", f"no backend serves model {request.model!r}; known: {known}")
            return Snapshot((), self.clock())  # nothing discovered yet: no_backend (503), not unknown
        ready = {b.spec.version for b in self.eligible(self.clock(), request.model) if b.spec.version}
        version = request.version or self.routes.choose(request.model, ready, request.headers)
        if version and not any(b.spec.serves(request.model, version) for b in members):
            known = sorted({b.spec.version for b in members if b.spec.version})
            raise GatewayError(
                404, "unknown_version", f"model {request.model!r} has no version {version!r}; known: {known}"
            )
        return self.snapshot(request.model, version)

    def concurrency(self, model: str) -> int | None:
        """Requests the model's eligible backends can hold without a long queue, by their reports; None: unknown."""
        return pool_concurrency(self.eligible(self.clock(), model))

    def known_full(self, address: str) -> bool:
        """Whether a fresh load report says this backend's queue is full (an unknown backend is not)."""
        backend = self.backends.get(address)
        return backend is not None and known_full(backend, self.clock(), self._settings.max_report_age_s)

    async def still_answers(self, backend: Backend, since: float) -> bool:
        """Whether the backend answered every health check since `since` and answers one now.

        Then a request that outlasted its per-try timeout there is slow, not stuck on a failed backend
        (a SIGSTOPped worker that resumed in time for the last check still failed the ones in between).
        """
        health = backend.health
        return health.healthy and health.doubted_at < since and await self.checker.answers(backend)

    def _stalled(self, backend: Backend) -> None:
        """A health check of `backend` timed out or took it out: tell the dispatcher, whose calls there are stuck."""
        for listener in self.stall_listeners:
            listener(backend.address)

    def record_failure(self, backend: Backend) -> None:
        """Let outlier detection look at a backend after a failure on real traffic.

        The ejection cap counts the backend's own model pool (and backends that serve any model), not
        every backend of the gateway: a model with two workers may lose at most its share of them.
        """
        model = backend.spec.model
        peers = [b.health for b in self.backends.values() if model is None or b.spec.serves(model)]
        self.outliers.consider(backend.address, backend.health, backend.stats.consecutive_errors, peers, self.clock())

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
        self._started = True
        for address, backend in self.backends.items():
            if not backend.leaving and address not in self._checks:
                self._checks[address] = asyncio.create_task(self.checker.run(backend), name=f"health {address}")

    async def close(self) -> None:
        """Stop health checks and removals, and close every channel."""
        tasks = [*self._checks.values(), *self._retiring]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._checks.clear()
        await asyncio.gather(*(b.close() for b in self.backends.values()))
