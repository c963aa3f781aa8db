"""The gateway's Prometheus metrics: a few observations on the request path, the rest read at scrape time.

Observed as requests finish (one place each): requests by route/model/code/backend and total latency
(the RequestMetrics middleware), admission wait (AdmissionController) and backend time (BackendStats).
Everything else (in-flight, backend states, ejections, retries, hedges, rejections, load reports, jobs)
is read from the objects that own it when Prometheus scrapes, by GatewayCollector.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.edge.buffer_limits import buffer_metrics
from depthserve.gateway.edge.edge import Edge
from depthserve.gateway.upstream.backend_health import DRAINING, EJECTED, LEAVING, READY, UNHEALTHY, WARMING
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.gateway.upstream.scaling_signal import ScalingSignals
from depthserve.settings import GatewaySettings
from depthserve.telemetry.buckets import LATENCY_BOUNDS_S, BucketCounts
from depthserve.telemetry.build_info import BuildInfo
from depthserve.telemetry.history import RequestHistory

STATES = (WARMING, READY, UNHEALTHY, EJECTED, DRAINING, LEAVING)
MODEL_KEY = "depthserve.model"  # scope keys an endpoint sets so the middleware can label its request
BACKEND_KEY = "depthserve.backend"
JobsSource = Callable[[], Awaitable[tuple[int, float | None]]]  # (jobs queued, epoch of the oldest)
disable_created_metrics()  # `_created` series double the output and no dashboard or rule here reads them


def histogram_family(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    """An empty histogram family to fill with `add_buckets`."""
    return HistogramMetricFamily(name, doc, labels=labels)


def add_buckets(family: HistogramMetricFamily, values: list[str], counts: BucketCounts) -> None:
    """Add one labelled histogram from counts kept by the object that measured them."""
    family.add_metric(values, counts.cumulative(), counts.sum)


class GatewayCollector(Collector):
    """Reads pool, admission, dispatcher and jobs state at scrape time (on the event loop)."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        """Yield every scrape-time family."""
        yield from self._edge()
        yield from self._dispatcher()
        yield from self._backends()
        yield from self._jobs()
        yield from self._scaling()

    def _edge(self) -> Iterator[Metric]:
        edge = self._m.edge
        admission = edge.admission
        yield GaugeMetricFamily(
            "depthserve_gateway_in_flight", "Requests admitted and not finished (holding a slot).", admission.in_flight
        )
        queued = GaugeMetricFamily(
            "depthserve_gateway_admission_queued", "Requests waiting for an admission slot.", labels=["priority"]
        )
        for priority, count in admission.queued.items():
            queued.add_metric([priority], count)
        yield queued
        yield CounterMetricFamily(
            "depthserve_gateway_admitted", "Requests that got an admission slot.", admission.admitted
        )
        yield CounterMetricFamily(
            "depthserve_gateway_admitted_express",
            "Requests of a client under its share let past the workers' capacity to the front of a worker's queue.",
            admission.express,
        )
        wait = histogram_family(
            "depthserve_gateway_admission_wait_seconds", "Time admitted requests waited for a slot.", []
        )
        add_buckets(wait, [], admission.wait_seconds)
        yield wait
        rejected = CounterMetricFamily(
            "depthserve_gateway_rejections",
            "Requests refused before any backend saw them, by reason.",
            labels=["reason"],
        )
        reasons = {"queue_full": 0, "deadline": 0, **admission.rejected, "rate_limited": edge.limiter.limited}
        reasons |= {**edge.uploads.refused, **edge.replies.refused}
        for reason, count in sorted(reasons.items()):
            rejected.add_metric([reason], count)
        yield rejected
        yield from buffer_metrics(edge.uploads, edge.replies)

    def _dispatcher(self) -> Iterator[Metric]:
        dispatcher = self._m.dispatcher
        yield CounterMetricFamily(
            "depthserve_gateway_retries", "Attempts sent to another backend after a failure.", dispatcher.budget.retries
        )
        yield CounterMetricFamily(
            "depthserve_gateway_retries_refused", "Retries the retry budget refused.", dispatcher.budget.refused
        )
        yield CounterMetricFamily(
            "depthserve_gateway_hedges",
            "Second attempts sent because the first was slower than p95.",
            dispatcher.hedges,
        )

    def _backends(self) -> Iterator[Metric]:
        pool = self._m.pool
        now = pool.clock()
        max_age = self._m.settings.max_report_age_s
        weights = pool.weights(now)
        b = ["backend"]
        up = GaugeMetricFamily("depthserve_gateway_backend_up", "1 when the backend takes traffic (ready).", labels=b)
        state = GaugeMetricFamily(
            "depthserve_gateway_backend_state",
            "1 for the backend's current state, 0 for the others.",
            labels=[*b, "state"],
        )
        in_flight = GaugeMetricFamily("depthserve_gateway_backend_in_flight", "Calls on the backend now.", labels=b)
        calls = CounterMetricFamily(
            "depthserve_gateway_backend_requests", "Finished calls to the backend, by outcome.", labels=[*b, "outcome"]
        )
        ejections = CounterMetricFamily(
            "depthserve_gateway_backend_ejections", "Times outlier detection ejected the backend.", labels=b
        )
        duration = histogram_family(
            "depthserve_gateway_backend_request_duration_seconds", "Successful call time to the backend.", b
        )
        ewma = GaugeMetricFamily(
            "depthserve_gateway_backend_latency_ewma_seconds", "EWMA of the backend's call latency.", labels=b
        )
        weight = GaugeMetricFamily(
            "depthserve_gateway_backend_weight", "Balancing weight (static or measured).", labels=b
        )
        queue = GaugeMetricFamily(
            "depthserve_gateway_backend_queue_depth", "Queued requests in the backend's last load report.", labels=b
        )
        util = GaugeMetricFamily(
            "depthserve_gateway_backend_gpu_utilization_ratio",
            "Accelerator busy fraction in its last report.",
            labels=b,
        )
        mem_used = GaugeMetricFamily(
            "depthserve_gateway_backend_gpu_memory_used_bytes", "Accelerator memory used, last report.", labels=b
        )
        mem_total = GaugeMetricFamily(
            "depthserve_gateway_backend_gpu_memory_total_bytes", "Accelerator memory, last report.", labels=b
        )
        age = GaugeMetricFamily(
            "depthserve_gateway_backend_load_report_age_seconds", "Age of the backend's last load report.", labels=b
        )
        for address, backend in pool.backends.items():
            current = backend.state(now)
            stats = backend.stats
            up.add_metric([address], 1.0 if current == READY else 0.0)
            for name in STATES:
                state.add_metric([address, name], 1.0 if current == name else 0.0)
            in_flight.add_metric([address], stats.in_flight)
            calls.add_metric([address, "ok"], stats.served)
            calls.add_metric([address, "error"], stats.errors)
            ejections.add_metric([address], backend.health.times_ejected)
            add_buckets(duration, [address], stats.latency)
            ewma.add_metric([address], stats.ewma_ms / 1000.0)
            weight.add_metric([address], weights.get(address, 0.0))
            load = backend.fresh_load(now, max_age)
            if load is not None:  # a stale report is unknown, not idle: export nothing
                queue.add_metric([address], load.queue)
                util.add_metric([address], load.gpu_util)
                mem_used.add_metric([address], load.mem_used)
                mem_total.add_metric([address], load.mem_total)
            if backend.load is not None:
                age.add_metric([address], now - backend.load_at)
        yield from (
            up,
            state,
            in_flight,
            calls,
            ejections,
            duration,
            ewma,
            weight,
            queue,
            util,
            mem_used,
            mem_total,
            age,
        )

    def _jobs(self) -> Iterator[Metric]:
        count, oldest = self._m.jobs
        yield GaugeMetricFamily("depthserve_gateway_jobs_queued", "Async jobs waiting for a worker.", count)
        age = 0.0 if oldest is None else max(0.0, time.time() - oldest)
        yield GaugeMetricFamily(
            "depthserve_gateway_jobs_oldest_age_seconds", "Age of the oldest queued async job (0 when none).", age
        )

    def _scaling(self) -> Iterator[Metric]:
        m = ["model"]
        desired = GaugeMetricFamily(
            "depthserve_gateway_desired_workers",
            "Workers the model pool should run: the scaling rule, stabilised (scale down after the quiet window).",
            labels=m,
        )
        demand = GaugeMetricFamily(
            "depthserve_gateway_scaling_demand_workers",
            "Workers this gateway's traffic keeps busy at the target utilisation, unrounded (sum over gateways).",
            labels=m,
        )
        serving = GaugeMetricFamily(
            "depthserve_gateway_serving_workers", "Workers of the model pool taking traffic now.", labels=m
        )
        waiting = GaugeMetricFamily(
            "depthserve_gateway_pool_waiting", "Requests of the model waiting in the gateway for a slot.", labels=m
        )
        for reading in self._m.scaling.evaluate():
            desired.add_metric([reading.model], reading.desired)
            demand.add_metric([reading.model], reading.demand)
            serving.add_metric([reading.model], reading.load.workers)
            waiting.add_metric([reading.model], reading.load.waiting)
        yield from (desired, demand, serving, waiting)


class GatewayMetrics:
    """The gateway's registry (one per app, so apps in one process never collide) and its hot-path metrics."""

    def __init__(self, settings: GatewaySettings, pool: BackendPool, dispatcher: Dispatcher, edge: Edge) -> None:
        self.settings = settings
        self.pool = pool
        self.dispatcher = dispatcher
        self.edge = edge
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "depthserve_gateway_requests",
            "HTTP requests answered, by route, model, status code and the backend that answered.",
            ["route", "model", "code", "backend"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "depthserve_gateway_request_duration_seconds",
            "Time from request start to the last byte of the answer, by route and model.",
            ["route", "model"],
            buckets=LATENCY_BOUNDS_S,
            registry=self.registry,
        )
        self._children: dict[tuple[str, str, int, str], tuple[Counter, Histogram]] = {}
        self.history = RequestHistory()
        self.known_models = {settings.model, *settings.policies, *settings.model_limits}
        self.jobs: tuple[int, float | None] = (0, None)
        self.jobs_source: JobsSource | None = None
        self.scaling = ScalingSignals(settings, pool, edge.admission.model_waiting)  # /metrics and /v1/cluster
        pool.removal_listeners.append(self.forget_backend)
        self.registry.register(GatewayCollector(self))
        self.registry.register(BuildInfo("gateway"))
        ProcessCollector(registry=self.registry)

    def forget_backend(self, address: str) -> None:
        """Drop a removed backend's request series, so backends churning through discovery do not pile up."""
        for key in [key for key in self._children if key[3] == address]:
            del self._children[key]
            route, model, code, _ = key
            self.requests.remove(route, model, str(code), address)

    def model_label(self, model: str) -> str:
        """Keep label values bounded: models the gateway is configured for, else 'other'."""
        return model if not model or model in self.known_models else "other"

    def observe(self, route: str, model: str, code: int, backend: str, seconds: float) -> None:
        """Count one answered request (the one observation point of total latency)."""
        if backend and backend not in self.pool.backends:
            backend = ""  # removed meanwhile (a slow client): keep no series for addresses gone for good
        key = (route, self.model_label(model), code, backend)
        children = self._children.get(key)
        if children is None:  # labels() takes a lock and builds a tuple: do it once per label set
            children = self._children[key] = (
                self.requests.labels(route, key[1], str(code), backend),
                self.duration.labels(route, key[1]),
            )
        children[0].inc()
        children[1].observe(seconds)
        if route in INFERENCE_ROUTES or route.endswith(("/infer", "/ModelInfer")):
            self.history.observe(seconds, code >= 500)

    async def refresh_jobs(self, timeout_s: float = 1.0) -> None:
        """Ask the job store how many jobs wait (async, so before the synchronous collectors run)."""
        if self.jobs_source is None:
            return
        with contextlib.suppress(Exception):  # a broker that is down must not break the scrape
            async with asyncio.timeout(timeout_s):
                self.jobs = await self.jobs_source()

    async def exposition(self) -> bytes:
        """Render every metric in the Prometheus text format."""
        await self.refresh_jobs()
        return generate_latest(self.registry)


INFERENCE_ROUTES = frozenset({"/v1/depth"})
"""Image routes: their latencies feed the dashboard history (a video's minutes would swamp its percentiles)."""
FAST_ROUTES = INFERENCE_ROUTES | {"/v1/depth/video"}
"""Routes the gateway answers before Starlette routing: each is its own `route` label."""


def route_label(scope: Scope) -> str:
    """The route template (bounded): the fast path's own path, Starlette's matched route, or 'other'."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    return scope["path"] if scope["path"] in FAST_ROUTES else "other"


class RequestMetrics:
    """ASGI middleware: observes each HTTP request once, when it ends, with its status and labels."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an app that raised before answering

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if BACKEND_KEY not in scope:  # inference routes name the backend that answered in x-backend
                    for name, value in message.get("headers", ()):
                        if name == b"x-backend":
                            scope[BACKEND_KEY] = value.decode("latin-1")
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            model = scope.get(MODEL_KEY) or scope.get("path_params", {}).get("model", "")  # OIP: /v2/models/{model}
            self.metrics.observe(
                route_label(scope), model, status, scope.get(BACKEND_KEY, ""), time.perf_counter() - started
            )
