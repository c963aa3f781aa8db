"""The gateway's ASGI application: its parts wired together, and the lifespan that runs the backend pool."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from depthserve.balancer import make_policy
from depthserve.discovery.backend_spec import parse_backend
from depthserve.discovery.urls import check_url
from depthserve.gateway.config import EdgeConfig
from depthserve.gateway.dispatch.core import GatewayCore
from depthserve.gateway.dispatch.job_executor import gateway_executor
from depthserve.gateway.dispatch.video_jobs import VideoJobs
from depthserve.gateway.edge.edge import Edge
from depthserve.gateway.edge.video_share import VideoShare
from depthserve.gateway.http.access import RouteAccess
from depthserve.gateway.http.control_routes import cluster, cluster_view, drain, healthz, readyz, restricted
from depthserve.gateway.http.dashboard import observability_routes
from depthserve.gateway.http.depth_route import DepthEndpoint
from depthserve.gateway.http.error_boundary import ErrorBoundary, exception_handlers
from depthserve.gateway.http.jobs_routes import job_routes
from depthserve.gateway.http.openapi import openapi_document
from depthserve.gateway.http.video_job_submit import VideoJobSubmission
from depthserve.gateway.http.video_route import VideoEndpoint
from depthserve.gateway.metrics import GatewayMetrics, RequestMetrics
from depthserve.gateway.oip.grpc_service import start_grpc
from depthserve.gateway.oip.rest import oip_routes
from depthserve.gateway.oip.service import OipService
from depthserve.gateway.processes.drains import apply_recorded_drains, drained_addresses
from depthserve.gateway.processes.peers import Handler, PeerServer
from depthserve.gateway.processes.share import ProcessShare
from depthserve.gateway.upstream import discovery_sync
from depthserve.jobs.broker import broker_kind
from depthserve.jobs.service import JobService
from depthserve.settings import GatewaySettings
from depthserve.telemetry.logs import configure_logging
from depthserve.telemetry.tracing import configure_tracing

SETTINGS_ENV = "DEPTHSERVE_INTERNAL_GATEWAY_JSON"
IN_PROCESS_JOBS = (
    "the in-process job queue lives in one process: with --processes above 1, give --broker (redis:// or amqp://)"
    " for the job API"
)
log = logging.getLogger("depthserve.gateway")


def check_settings(settings: GatewaySettings) -> None:
    """Fail early, with the reason, on backend specs or policies that would fail inside the server."""
    for text in settings.backends:
        parse_backend(text)
    for url in settings.discovery:
        check_url(url)
    make_policy(settings.policy, settings.policy_options)
    for model, policy in settings.policies.items():
        try:
            make_policy(policy.name, policy.options)
        except ValueError as exc:
            raise ValueError(f"policy for model {model!r}: {exc}") from None
    RouteAccess(settings, Edge(EdgeConfig.of(settings)).keys)  # key files, rate limits and admission limits parse
    broker_kind(settings.broker)  # a jobs broker URL names redis:// or amqp://
    if (settings.tls_cert is None) != (settings.tls_key is None):
        raise ValueError("give both --tls-cert and --tls-key, or neither")
    if settings.tls_key is not None and b"BEGIN PRIVATE KEY" not in settings.tls_key.read_bytes():
        raise ValueError(
            f"{settings.tls_key} is not a PKCS#8 key; convert it: openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pk8"
        )


class FastPath:
    """Sends the hot route straight to its bare ASGI app, everything else through Starlette."""

    def __init__(self, routes: dict[str, ASGIApp], fallback: Starlette) -> None:
        self._routes = routes
        self.fallback = fallback
        self.state = fallback.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            route = self._routes.get(scope["path"])
            if route is not None:
                await route(scope, receive, send)
                return
        await self.fallback(scope, receive, send)


def create_app(settings: GatewaySettings, share: ProcessShare | None = None) -> FastPath:
    """Build the gateway app for these settings; the pool starts and stops with the ASGI lifespan.

    With `share`, this is one of a gateway's processes: limits hold across them all, views of the
    gateway gather every process's, and only process 0 serves the OIP gRPC port.
    """
    core = GatewayCore.build(settings, share=share)
    pool, dispatcher, edge, forwarder = core.pool, core.dispatcher, core.edge, core.forwarder
    if share is not None:
        pool.recorded_drains = lambda: drained_addresses(share)
    videos = VideoShare(settings, pool.concurrency)  # videos at once, and their frames' share of admission
    oip = OipService(pool, dispatcher, forwarder)
    metrics = GatewayMetrics(settings, pool, dispatcher, edge)
    jobs = JobService.from_settings(settings, gateway_executor(dispatcher))
    metrics.jobs_source = jobs.store.queued  # depthserve_gateway_jobs_queued / _oldest_age_seconds
    video_jobs = VideoJobs(settings, jobs.store, forwarder, videos)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await pool.start()
        following = discovery_sync.start(pool, settings)  # membership and version routes change at run time
        if share is not None and jobs.broker.kind == "in_process":
            jobs.start_error = IN_PROCESS_JOBS  # the job API answers 503 with this, never a wrong 404
            log.warning(IN_PROCESS_JOBS)
        else:
            await jobs.start()
        serves_grpc = share is None or share.index == 0  # gRPC cannot serve a socket bound once: one process
        grpc_server = await start_grpc(oip, edge, metrics) if serves_grpc else None  # on this event loop
        siblings = None if share is None else PeerServer(share, sibling_handlers(app, metrics))
        if siblings is not None and share is not None:
            await siblings.start()
            apply_recorded_drains(pool, share)  # drains sent before this process could hear them
        # What start-up made lives as long as the process: out of the collector's sight, a full collection
        # walks only what requests make. Measured under overload: a 95 ms gen-2 pause before, none after.
        gc.freeze()
        try:
            yield
        finally:
            if siblings is not None:
                await siblings.close()
            if grpc_server is not None:
                await grpc_server.stop(grace=1.0)
            await video_jobs.close()  # each is failed, saying so, while the job store is still open
            await jobs.close()
            await discovery_sync.stop(following)
            await pool.close()

    app = Starlette(
        exception_handlers=exception_handlers(),  # type: ignore[arg-type]  # the handlers' type is narrower
        routes=[
            Route("/healthz", restricted(healthz, RouteAccess.check_health)),
            Route("/readyz", restricted(readyz, RouteAccess.check_health)),
            Route("/v1/cluster", restricted(cluster, RouteAccess.check_observer)),
            Route("/v1/cluster/{backend}/{action}", restricted(drain, RouteAccess.check_admin), methods=["POST"]),
            Route("/openapi.json", restricted(openapi_document, RouteAccess.check_health)),
            *observability_routes(),
            *job_routes(settings, jobs, edge, VideoJobSubmission(settings, jobs, forwarder, videos, video_jobs)),
            *oip_routes(oip),
        ],
        middleware=[Middleware(RequestMetrics, metrics=metrics)],
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.pool = pool
    app.state.dispatcher = dispatcher
    app.state.edge = edge
    app.state.access = RouteAccess(settings, edge.keys)
    app.state.metrics = metrics
    app.state.jobs = jobs
    app.state.oip = oip
    app.state.videos = videos
    app.state.video_jobs = video_jobs
    app.state.share = share
    depth = DepthEndpoint(settings, forwarder)
    video = VideoEndpoint(settings, forwarder, videos)
    app.state.fast_paths = {"/v1/depth": depth, "/v1/depth/video": video}  # for the OpenAPI document
    return FastPath(
        {
            "/v1/depth": RequestMetrics(ErrorBoundary(depth, "request"), metrics),
            "/v1/depth/video": RequestMetrics(ErrorBoundary(video, "video"), metrics),
        },
        app,
    )


def app_from_env() -> FastPath:
    """Factory granian calls in its worker process; settings travel in an environment variable."""
    settings = GatewaySettings(**json.loads(os.environ[SETTINGS_ENV]))
    configure_logging("gateway", settings.log_format, settings.log_level)
    configure_tracing("depthserve-gateway")
    return create_app(settings, ProcessShare.from_env(settings.processes or 1))


def sibling_handlers(app: Starlette, metrics: GatewayMetrics) -> dict[str, Handler]:
    """What this process tells its siblings: its metrics, cluster view and history, and drains it applies."""

    async def exposition(args: list[str]) -> bytes:
        return await metrics.exposition()

    async def cluster(args: list[str]) -> bytes:
        return json.dumps(await cluster_view(app.state)).encode()

    async def history(args: list[str]) -> bytes:
        return json.dumps(metrics.history.export()).encode()

    async def drain(args: list[str]) -> bytes:
        address, action = args
        with contextlib.suppress(KeyError):  # not (yet) in this process's view: nothing to stop
            app.state.pool.set_drained(address, action == "drain")
        return b"ok"

    return {"metrics": exposition, "cluster": cluster, "history": history, "drain": drain}
