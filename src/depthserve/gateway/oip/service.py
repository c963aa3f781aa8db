"""The gateway's Open Inference Protocol service, protocol-neutral: the REST routes and the gRPC servicer both call it.

Inference goes through the same Forwarder as `/v1/depth` (key, rate limit, admission, balanced
dispatch with retries). Metadata, readiness and config are not hardcoded: they are asked of the
ready backends, in the model's policy order, so any OIP v2 server can stand behind the gateway.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from tritonclient.grpc import service_pb2 as pb

from depthserve import __version__
from depthserve.balancer.types import RequestInfo
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.dispatch.forwarding import BuildRequest, Forwarder, InferRequest
from depthserve.gateway.edge.upload_budget import UploadLease
from depthserve.gateway.errors import GatewayError, no_backend
from depthserve.gateway.http.request_cost import check_oip_cost
from depthserve.gateway.oip.json_requests import check_name
from depthserve.gateway.oip.replies import config_from_metadata, message_to_json
from depthserve.gateway.oip.stats import ModelStats
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.gateway.upstream.transport import Fault, InferResponse, Transport, TransportError
from depthserve.protocol.infer_wire import header_of
from depthserve.protocol.tensors import TensorError
from depthserve.telemetry.tracing import span

T = TypeVar("T")
SERVER_NAME = "depthserve"
EXTENSIONS = ("binary_tensor_data", "model_configuration", "statistics")


class OipService:
    """Answers OIP calls for the gateway: its own liveness and stats, everything about models from a backend."""

    def __init__(self, pool: BackendPool, dispatcher: Dispatcher, forwarder: Forwarder) -> None:
        self.pool = pool
        self.dispatcher = dispatcher
        self.forwarder = forwarder
        self.settings = forwarder.settings
        self.stats = ModelStats()
        settings = self.settings
        self.known_models = {settings.model, *settings.policies, *settings.model_limits}

    def server_metadata(self) -> pb.ServerMetadataResponse:
        """Name, version and protocol extensions of the gateway itself."""
        return pb.ServerMetadataResponse(name=SERVER_NAME, version=__version__, extensions=list(EXTENSIONS))

    def server_ready(self) -> bool:
        """Ready while at least one backend may take traffic."""
        return self.pool.ready_count() > 0

    def _candidates(self, model: str, version: str) -> list[str]:
        """The ready backends of the model's pool (404 if no backend is tagged with it), in policy order."""
        info = RequestInfo(model=model, version=version)
        return list(self.dispatcher.policy_for(model).pick(self.pool.snapshot_for(info), info))

    async def _ask(self, model: str, version: str, call: Callable[[Transport, float], Awaitable[T]]) -> T:
        """Ask ready backends in policy order until one answers; NOT_FOUND from every one is a 404.

        Each question is a call on the pool like an inference (counted in flight), never a latency sample.
        """
        failure: GatewayError | None = None
        for address in self._candidates(model, version):
            claim = self.pool.checkout(address)
            if claim is None:
                continue
            with claim:
                try:
                    return await call(claim.backend.transport, self.settings.per_try_timeout_s)
                except TransportError as error:
                    translated = error.error(address)
                    if failure is None or failure.status == 404:  # a backend fault says more than "not here"
                        failure = translated
        raise failure or no_backend(model)

    async def model_ready(self, model: str, version: str) -> bool:
        """Whether some ready backend says the model (and version) is ready."""
        check_model(model, version)
        try:
            candidates = self._candidates(model, version)
        except GatewayError:
            return False
        for address in candidates:
            claim = self.pool.checkout(address)
            if claim is None:
                continue
            with claim:
                try:
                    if await claim.backend.transport.model_ready(model, version, self.settings.health_timeout_s):
                        return True
                except TransportError:
                    continue
        return False

    async def model_metadata(self, model: str, version: str) -> pb.ModelMetadataResponse:
        """The model's metadata, as a backend that serves it reports it."""
        check_model(model, version)

        async def ask(transport: Transport, timeout: float) -> pb.ModelMetadataResponse:
            return await transport.model_metadata(model, version, timeout)

        return await self._ask(model, version, ask)

    async def model_config(self, model: str, version: str) -> dict[str, Any]:
        """The model's Triton config (REST JSON form): the backend's own, or derived from its metadata."""
        check_model(model, version)

        async def ask(transport: Transport, timeout: float) -> dict[str, Any]:
            try:
                reply = await transport.model_config(model, version, timeout)
            except TransportError as error:
                if error.fault is not Fault.UNIMPLEMENTED:
                    raise
            else:
                config = message_to_json(reply.config)
                config.setdefault("max_batch_size", 0)
                return config
            return config_from_metadata(await transport.model_metadata(model, version, timeout))

        return await self._ask(model, version, ask)

    async def statistics(self, model: str, version: str) -> dict[str, Any]:
        """The gateway's inference statistics; for a named model, 404 unless some backend serves it."""
        check_model(model, version)
        if model:
            await self.model_metadata(model, version)
        return self.stats.report(model, version)

    async def infer(
        self,
        model: str,
        version: str,
        headers: Mapping[str, str],
        client: str | None,
        request_id: str,
        timeout_s: float | None,
        build: BuildRequest,
    ) -> tuple[InferResponse, str]:
        """Forward one inference like any other request (admitted, balanced, retried) and count it.

        A (model, version) gets a statistics row once a backend served it, or from the start for a
        configured model without a version: failures alone never add a row, so names a client makes up
        (refused with 401, 404 or 400) cannot grow the table.
        """
        check_model(model, version)
        started = time.perf_counter_ns()
        ok = False

        async def checked(lease: UploadLease) -> InferRequest:
            request = await build(lease)
            check_oip_cost(header_of(request), self.settings)  # refuse what every worker would, before forwarding
            return request

        try:
            with span("gateway.oip_request", request_id, model=model):
                reply, backend = await self.forwarder.forward(
                    model, headers, client, request_id, timeout_s, checked, version
                )
            ok = True
            return reply, backend
        finally:
            if ok or self.stats.has(model, version) or (model in self.known_models and not version):
                self.stats.record(model, version, ok, time.perf_counter_ns() - started)


def check_model(model: str, version: str) -> None:
    """Refuse a model or version name no backend could serve (too long, not Unicode) before anything else sees it."""
    try:
        if model:
            check_name(model, "model name")
        if version:
            check_name(version, "model version")
    except TensorError as exc:
        raise GatewayError(400, "invalid_request", str(exc)) from None
