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
import time
from collections.abc import Callable

from depthserve.balancer.types import RequestInfo, Snapshot
from depthserve.discovery.backend_spec import BackendSpec, parse_backend
from depthserve.gateway.config import HealthCheckConfig, OutlierConfig, PoolConfig, UpstreamConfig
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.upstream.backend import Backend
from depthserve.gateway.upstream.backend_slots import SlotQueue
from depthserve.gateway.upstream.backend_stats import BackendStats
from depthserve.gateway.upstream.calls import Call, Outcome
from depthserve.gateway.upstream.capacity import backend_concurrency, known_full, pool_concurrency
from depthserve.gateway.upstream.grpc_transport import GrpcTransport, UpstreamTls
from depthserve.gateway.upstream.health_checks import HealthChecker
from depthserve.gateway.upstream.outlier import OutlierDetector
from depthserve.gateway.upstream.pool_tables import PoolTables, eligible, measured_weights
from depthserve.gateway.upstream.transport import Transport
from depthserve.gateway.upstream.version_split import VersionSplitter
from depthserve.protocol.load_report import LoadReport
from depthserve.settings import GatewaySettings

log = logging.getLogger("depthserve.gateway")
TransportFactory = Callable[[BackendSpec], Transport]
OutcomeListener = Callable[[Backend, Outcome, float], None]  # backend, outcome, latency in ms (0 unless ok)


def grpc_transports(config: UpstreamConfig) -> TransportFactory:
    """Make a GrpcTransport per backend, with TLS (and mutual TLS) to the workers when a CA is configured."""
    tls = None
    if config.backend_tls_ca is not None:
        tls = UpstreamTls(config.backend_tls_ca, config.backend_tls_cert, config.backend_tls_key)
    credentials = tls.credentials() if tls is not None else None
    return lambda spec: GrpcTransport(spec.address, config.max_message_mb, credentials)


class BackendPool:
    """All backends of the gateway; health checks, outlier detection and operators flip their flags."""

    def __init__(
        self,
        settings: PoolConfig,
        health: HealthCheckConfig,
        outlier: OutlierConfig,
        transports: TransportFactory,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self.clock = clock
        self.backends: dict[str, Backend] = {}
        self._transports = transports
        self._checks: dict[str, asyncio.Task[None]] = {}  # one health-check task per backend, once started
        self._retiring: dict[str, asyncio.Event] = {}  # removed backends waiting for their calls to end
        self._retire_tasks: set[asyncio.Task[None]] = set()
        self._started = False
        self.tables = PoolTables(
            lambda: list(self.backends.values()),
            settings.max_report_age_s,
            settings.panic_threshold_percent,
            settings.slow_start_s,
        )
        # Addresses an operator drained gateway-wide (a gateway of several processes records them): a backend
        # added later starts drained, whichever process adds it.
        self.recorded_drains: Callable[[], frozenset[str]] = frozenset
        self.outcome_listeners: list[OutcomeListener] = []  # told how every call ended (latency windows, policies)
        self.routes = VersionSplitter.from_config(settings.versions, settings.version_seed)
        for text in settings.backends:
            self.add(parse_backend(text, default_auto=settings.auto_weights))
        self.checker = HealthChecker(health, clock, on_stall=self._stalled)
        self.outliers = OutlierDetector(
            outlier.consecutive_errors, outlier.base_ejection_s, outlier.max_ejection_s, outlier.max_ejection_percent
        )
        self.slots = SlotQueue()  # requests waiting for a backend under max_outstanding_per_backend
        self.removal_listeners: list[Callable[[str], None]] = []  # told the address of each backend removed
        self.stall_listeners: list[Callable[[str], None]] = []  # told the address of a backend that stopped answering

    @classmethod
    def from_settings(
        cls,
        settings: GatewaySettings,
        clock: Callable[[], float] = time.monotonic,
        transports: TransportFactory | None = None,
    ) -> BackendPool:
        """The pool the gateway's settings describe, over gRPC unless `transports` says otherwise."""
        return cls(
            PoolConfig.of(settings),
            HealthCheckConfig.of(settings),
            OutlierConfig.of(settings),
            transports or grpc_transports(UpstreamConfig.of(settings)),
            clock,
        )

    def add(self, spec: BackendSpec) -> Backend:
        """Add a backend (checked before it takes traffic), or update the tags and weight of a known one."""
        backend = self.backends.get(spec.address)
        if backend is None:
            stats = BackendStats(alpha=self._settings.ewma_alpha, peak_decay_s=self._settings.peak_decay_s)
            backend = Backend(spec, self._transports(spec), stats)
            backend.health.on_change = self.tables.changed
            backend.drained = spec.address in self.recorded_drains()
            self.backends[spec.address] = backend
            log.info("backend %s added (%s, model %s, version %s)", spec.address, spec.source, spec.model, spec.version)
            self.tables.changed()
        elif backend.spec != spec or backend.leaving:
            log.info("backend %s updated (%s)", spec.address, spec)
            backend.spec = spec
            backend.leaving = False
            retiring = self._retiring.pop(spec.address, None)
            if retiring is not None:
                retiring.set()  # its retirement ends: it stays
            self.tables.changed()
        if self._started and spec.address not in self._checks:
            self._checks[spec.address] = asyncio.create_task(self.checker.run(backend), name=f"health {spec.address}")
        return backend

    def remove(self, address: str) -> None:
        """Take a backend out: no new requests at once; its transport closes after its in-flight calls end."""
        backend = self.backends.get(address)
        if backend is None or backend.leaving:
            return
        backend.leaving = True
        self.tables.changed()
        check = self._checks.pop(address, None)
        if check is not None:
            check.cancel()
        log.info("backend %s leaving (%d in flight)", address, backend.stats.in_flight)
        self._retiring[address] = done = asyncio.Event()
        if not backend.stats.in_flight:
            done.set()
        task = asyncio.create_task(self._retire(backend, done), name=f"retire {address}")
        self._retire_tasks.add(task)
        task.add_done_callback(self._retire_tasks.discard)

    async def _retire(self, backend: Backend, done: asyncio.Event) -> None:
        """Close a leaving backend once its last call settles (or the longest request deadline passed)."""
        try:
            async with asyncio.timeout(self._settings.max_request_timeout_s):
                await done.wait()
        except TimeoutError:
            pass
        if self._retiring.get(backend.address) is done:
            del self._retiring[backend.address]
        if not backend.leaving or self.backends.get(backend.address) is not backend:
            return  # added back meanwhile: it stays
        del self.backends[backend.address]
        self.tables.changed()
        self.checker.forget(backend.address)
        for listener in self.removal_listeners:
            listener(backend.address)
        await backend.close()
        log.info("backend %s removed", backend.address)

    def weights(self, now: float) -> dict[str, float]:
        """Give each backend's weight: static, or measured capacity (median of known ones if unknown)."""
        return measured_weights(self.backends.values(), now, self._settings.max_report_age_s)

    def eligible(self, now: float, model: str | None = None, version: str | None = None) -> list[Backend]:
        """Backends that may take traffic: healthy and accepting, and not ejected unless in panic.

        With `model` (and `version`), only that pool's backends, and panic is judged within the pool.
        """
        members = (b for b in self.backends.values() if model is None or b.spec.serves(model, version))
        return eligible(members, now, self._settings.panic_threshold_percent)

    def snapshot(self, model: str | None = None, version: str | None = None) -> Snapshot:
        """The eligible backends (of one model's pool, when given) for a policy: a table rebuilt only on change."""
        now = self.clock()
        table = self.tables.entry(model, version, now).table
        self.tables.instant.now = now  # the views read live counters as of this pick
        return Snapshot(table=table, now=now)

    def snapshot_for(self, request: RequestInfo) -> Snapshot:
        """Give the pool a request goes to: its model, and the version it names or the split chooses.

        Raises a 404 GatewayError when no backend at all serves the model or the version named.
        """
        now = self.clock()
        model = request.model
        members = self.tables.members(model)  # leaving backends too: while all of them drain it is a 503, not a 404
        if not members.count:
            if self.backends:
                models = sorted({b.spec.model for b in self.backends.values() if b.spec.model})
                raise GatewayError(404, "unknown_model", f"no backend serves model {model!r}; known: {models}")
            return Snapshot(now=now)  # nothing discovered yet: no_backend (503), not unknown
        entry = self.tables.entry(model, None, now)
        version = request.version or self.routes.choose(model, entry.versions, request.headers)
        if version and not members.serves(version):
            raise GatewayError(
                404, "unknown_version", f"model {model!r} has no version {version!r}; known: {sorted(members.versions)}"
            )
        if version is not None:  # else the model's whole pool, the entry just read
            entry = self.tables.entry(model, version, now)
        self.tables.instant.now = now  # the views read live counters as of this pick
        return Snapshot(table=entry.table, now=now)

    def concurrency(self, model: str) -> int | None:
        """Requests the model's eligible backends can hold without a long queue, by their reports; None: unknown."""
        return pool_concurrency(self.eligible(self.clock(), model))

    def backend_concurrency(self, address: str) -> int | None:
        """Requests one backend holds without a long queue, by its reports; None: unknown (or no such backend)."""
        backend = self.backends.get(address)
        return None if backend is None else backend_concurrency(backend)

    def known_full(self, address: str, now: float | None = None) -> bool:
        """Whether a fresh load report says this backend's queue is full (an unknown backend is not); `now` if known."""
        backend = self.backends.get(address)
        if backend is None:
            return False
        return known_full(backend, self.clock() if now is None else now, self._settings.max_report_age_s)

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
        backend.drained = drained
        self.tables.changed()
        log.info("backend %s %s by operator", address, "drained" if drained else "undrained")
        return backend

    def checkout(self, address: str) -> Call | None:
        """Claim a call on a backend that still takes new requests (counted in flight at once), or None."""
        backend = self.backends.get(address)
        if backend is None or not backend.accepting:
            return None
        backend.stats.started()
        return Call(self, backend, self.clock())

    def record_load(self, backend: Backend, load: LoadReport) -> None:
        """Keep a backend's newest load report, as of now."""
        backend.record_load(load, self.clock())

    def settle(self, call: Call) -> None:
        """Count a call's end once (Call calls this): stats, outlier detection, the freed slot, the listeners."""
        backend, stats, now = call.backend, call.backend.stats, self.clock()
        latency_ms = 0.0
        if call.outcome is Outcome.OK:
            latency_ms = (now - call.started_at) * 1000.0
            stats.finished(True, latency_ms, now)
        elif call.outcome is Outcome.FAILED:
            stats.finished(False, 0.0, now)
            self.record_failure(backend)
        else:
            stats.abandoned()
        self.slots.release(backend.spec.serves)
        if backend.leaving and not stats.in_flight:
            retiring = self._retiring.get(backend.address)
            if retiring is not None:
                retiring.set()
        for listener in self.outcome_listeners:
            listener(backend, call.outcome or Outcome.ABANDONED, latency_ms)

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
        """Stop health checks and removals, and close every transport."""
        tasks = [*self._checks.values(), *self._retire_tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._checks.clear()
        await asyncio.gather(*(b.close() for b in self.backends.values()))
