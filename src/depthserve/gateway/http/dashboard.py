"""The gateway's observability routes: /metrics for Prometheus, /dashboard for people, and its history feed."""

from __future__ import annotations

import json
from functools import cache
from importlib.resources import files

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from depthserve.gateway.http.access import RouteAccess
from depthserve.gateway.http.control_routes import restricted
from depthserve.gateway.metrics import GatewayMetrics
from depthserve.gateway.processes.gather import merge_metrics
from depthserve.gateway.processes.peers import ask_siblings
from depthserve.gateway.processes.share import ProcessShare


@cache
def dashboard_html() -> str:
    """The single self-contained page (inline script and styles, no CDN), read once from package data."""
    return files("depthserve.gateway.http").joinpath("static/dashboard.html").read_text(encoding="utf-8")


async def metrics(request: Request) -> Response:
    """Every gateway metric in the Prometheus text format."""
    registry: GatewayMetrics = request.app.state.metrics
    if registry.jobs_source is None:  # the async job API, once wired, keeps its store on app.state
        store = getattr(request.app.state, "job_store", None) or getattr(request.app.state, "jobs", None)
        queued = getattr(store, "queued", None) or getattr(getattr(store, "store", None), "queued", None)
        if callable(queued):
            registry.jobs_source = queued
    own = await registry.exposition()
    share: ProcessShare | None = getattr(request.app.state, "share", None)
    if share is None:
        return Response(own, media_type=CONTENT_TYPE_LATEST)
    others = await ask_siblings(share, "metrics")  # every process's series, labelled `process`
    return Response(merge_metrics({**others, share.index: own}), media_type=CONTENT_TYPE_LATEST)


async def history(request: Request) -> Response:
    """QPS, errors and p50/p95/p99 of inference requests over the last minutes, for the dashboard's charts."""
    raw = request.query_params.get("window_s", "5")
    # isdigit() alone admits "²", which int() refuses: ASCII digits only, and few of them
    window = int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 2 and 1 <= int(raw) <= 60 else 5
    history = request.app.state.metrics.history
    share: ProcessShare | None = getattr(request.app.state, "share", None)
    if share is not None:  # the whole gateway's requests: every process's seconds added up
        answers = await ask_siblings(share, "history")
        history = history.combined([json.loads(answer) for answer in answers.values()])
    return JSONResponse(history.series(window))


async def dashboard(request: Request) -> Response:
    """The live cluster page: backends with state and load, charts of QPS and p99."""
    return HTMLResponse(dashboard_html(), headers={"cache-control": "no-cache"})


def observability_routes() -> list[Route]:
    """Routes to add to the gateway app; behind a key with protect_observability or protect_health."""
    return [
        Route("/metrics", restricted(metrics, RouteAccess.check_observer)),
        Route("/v1/cluster/history", restricted(history, RouteAccess.check_observer)),
        Route("/dashboard", restricted(dashboard, RouteAccess.check_observer)),
    ]
