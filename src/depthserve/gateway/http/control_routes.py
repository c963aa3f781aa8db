"""The gateway's own routes: liveness, readiness, the cluster view and drain, each behind its access rule."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.http.access import RouteAccess
from depthserve.gateway.processes.drains import record_drain
from depthserve.gateway.processes.gather import merge_cluster
from depthserve.gateway.processes.peers import ask_siblings
from depthserve.gateway.processes.share import ProcessShare
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.jobs.errors import JobError

Handler = Callable[[Request], Awaitable[Response]]
Check = Callable[[RouteAccess, Mapping[str, str], str | None], None]


def guarded(handler: Handler, always: bool) -> Handler:
    """Require an API key (when keys are configured) always, or only when protect_health is set."""
    return restricted(handler, RouteAccess.check_api if always else RouteAccess.check_health)


def restricted(handler: Handler, check: Check) -> Handler:
    """Run `check` (e.g. RouteAccess.check_admin) on the app's RouteAccess first; its refusal is the answer."""

    async def wrapper(request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        check(request.app.state.access, headers, request.client.host if request.client else None)  # or raise
        return await handler(request)

    wrapper.__doc__ = handler.__doc__
    return wrapper


async def healthz(request: Request) -> Response:
    """Say the process is alive (liveness), whatever its backends do."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Say whether at least one backend can take traffic, so a load balancer in front can route here."""
    ready = request.app.state.pool.ready_count()
    if ready:
        return JSONResponse({"status": "ready", "ready_backends": ready})
    return JSONResponse({"status": "not_ready", "reason": "no_backend", "ready_backends": 0}, 503)


def _videos(state: Any) -> dict[str, object] | None:
    """Videos and their uploads' disk, and the video jobs this gateway holds."""
    if not hasattr(state, "videos"):
        return None
    return {**state.videos.describe(), "jobs": state.video_jobs.running}


async def cluster(request: Request) -> Response:
    """Describe policy, admission, retries and every backend: state, weight, load, latency, errors.

    In a gateway of several processes, the counts of every process are summed in (gather.py).
    """
    state = request.app.state
    share: ProcessShare | None = getattr(state, "share", None)
    own = await cluster_view(state)
    if share is None:
        return JSONResponse(own)
    answers = await ask_siblings(share, "cluster")
    views = {index: json.loads(answer) for index, answer in answers.items()}
    return JSONResponse(merge_cluster(share.index, {**views, share.index: own}))


async def cluster_view(state: Any) -> dict[str, Any]:
    """This process's /v1/cluster."""
    dispatcher: Dispatcher = state.dispatcher
    admission = state.edge.admission
    return dict(
        {
            "model": state.settings.model,
            "policy": dispatcher.default_policy.name,
            "policies": {model: policy.name for model, policy in dispatcher.policies.items()},
            "admission": {
                "in_flight": admission.in_flight,
                "queued": admission.queued,
                "admitted": admission.admitted,
                "express": admission.express,
                "rejected": dict(admission.rejected),
            },
            "rate_limited": state.edge.limiter.limited,
            "retries": dispatcher.budget.retries,
            "retries_refused": dispatcher.budget.refused,
            "hedges": dispatcher.hedges,
            "waiting_for_backend": state.pool.slots.waiting,
            "versions": state.pool.routes.describe(),
            "backends": state.pool.describe(),
            "scaling": state.metrics.scaling.describe(),
            "jobs": await job_stats(state),
            "videos": _videos(state),
        }
    )


async def job_stats(state: Any) -> dict[str, Any]:
    """Queue depth and oldest queued job age (for autoscaling); the error instead if the broker is down."""
    jobs = getattr(state, "jobs", None)
    if jobs is None:
        return {}
    try:
        return dict(await jobs.stats())
    except JobError as exc:
        return {**jobs.last_stats, "error": str(exc)}


async def drain(request: Request) -> Response:
    """Stop sending new requests to one backend (in-flight ones finish), or resume with /undrain."""
    pool: BackendPool = request.app.state.pool
    address, action = request.path_params["backend"], request.path_params["action"]
    if action not in ("drain", "undrain"):
        return JSONResponse({"error": f"unknown action {action!r}; use drain or undrain", "reason": "not_found"}, 404)
    try:
        backend = pool.set_drained(address, action == "drain")
    except KeyError:
        return JSONResponse({"error": f"no backend {address!r}", "reason": "unknown_backend"}, 404)
    share: ProcessShare | None = getattr(request.app.state, "share", None)
    if share is not None:  # every process balances on its own view: each one stops sending there
        record_drain(share, address, action == "drain")  # for a process starting now or restarted later
        await ask_siblings(share, "drain", address, action)
    return JSONResponse(backend.describe(pool.clock(), 0.0, backend.spec.weight or 1.0))
