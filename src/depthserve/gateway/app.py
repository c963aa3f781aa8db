"""The gateway's ASGI application: routes, and the lifespan that runs the backend pool."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from depthserve.balancer import make_policy
from depthserve.gateway.backend_spec import parse_backend
from depthserve.gateway.depth_route import DepthEndpoint
from depthserve.gateway.dispatcher import Dispatcher
from depthserve.gateway.pool import BackendPool
from depthserve.settings import GatewaySettings

SETTINGS_ENV = "DEPTHSERVE_INTERNAL_GATEWAY_JSON"


async def healthz(request: Request) -> JSONResponse:
    """Say the process is alive (liveness), whatever its backends do."""
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> JSONResponse:
    """Say whether at least one backend is ready, so a load balancer in front can route here."""
    ready = request.app.state.pool.ready_count()
    if ready:
        return JSONResponse({"status": "ready", "ready_backends": ready})
    return JSONResponse({"status": "not_ready", "reason": "no_backend", "ready_backends": 0}, 503)


async def cluster(request: Request) -> JSONResponse:
    """Describe the policy and every backend: state, weight, in-flight, served, errors, latency, load report."""
    state = request.app.state
    dispatcher: Dispatcher = state.dispatcher
    return JSONResponse(
        {
            "model": state.settings.model,
            "policy": dispatcher.default_policy.name,
            "policies": {model: policy.name for model, policy in dispatcher.policies.items()},
            "retries": dispatcher.budget.retries,
            "retries_refused": dispatcher.budget.refused,
            "hedges": dispatcher.hedges,
            "backends": state.pool.describe(),
        }
    )


async def drain(request: Request) -> JSONResponse:
    """Stop sending new requests to one backend (in-flight ones finish), or resume with /undrain."""
    pool: BackendPool = request.app.state.pool
    address, action = request.path_params["backend"], request.path_params["action"]
    if action not in ("drain", "undrain"):
        return JSONResponse({"error": f"unknown action {action!r}; use drain or undrain", "reason": "not_found"}, 404)
    try:
        backend = pool.set_drained(address, action == "drain")
    except KeyError:
        return JSONResponse({"error": f"no backend {address!r}", "reason": "unknown_backend"}, 404)
    return JSONResponse(backend.describe(pool.clock(), 0.0, backend.spec.weight or 1.0))


def check_settings(settings: GatewaySettings) -> None:
    """Fail early, with the reason, on backend specs or policies that would fail inside the server."""
    for text in settings.backends:
        parse_backend(text)
    make_policy(settings.policy, settings.policy_options)
    for model, policy in settings.policies.items():
        try:
            make_policy(policy.name, policy.options)
        except ValueError as exc:
            raise ValueError(f"policy for model {model!r}: {exc}") from None


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


def create_app(settings: GatewaySettings) -> FastPath:
    """Build the gateway app for these settings; the pool starts and stops with the ASGI lifespan."""
    pool = BackendPool(settings)
    policies = {model: make_policy(p.name, p.options) for model, p in settings.policies.items()}
    dispatcher = Dispatcher(pool, settings, make_policy(settings.policy, settings.policy_options), policies)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await pool.start()
        try:
            yield
        finally:
            await pool.close()

    app = Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/v1/cluster", cluster),
            Route("/v1/cluster/{backend}/{action}", drain, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.pool = pool
    app.state.dispatcher = dispatcher
    return FastPath({"/v1/depth": DepthEndpoint(settings, dispatcher)}, app)


def app_from_env() -> FastPath:
    """Factory granian calls in its worker process; settings travel in an environment variable."""
    return create_app(GatewaySettings(**json.loads(os.environ[SETTINGS_ENV])))
