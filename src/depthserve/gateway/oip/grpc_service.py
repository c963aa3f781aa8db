"""OIP v2 gRPC (`inference.GRPCInferenceService`) on the gateway, served in the gateway's own event loop.

The servicer is a thin skin over OipService: each ModelInfer (and each request on a
ModelStreamInfer stream) is keyed, rate-limited, admitted and dispatched like a REST request.
GatewayError becomes a gRPC status in one place, `_answer` (on a stream: an error reply).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable
from typing import NoReturn, TypeVar

import grpc
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.gateway.edge.edge import Edge
from depthserve.gateway.edge.upload_budget import UploadLease
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.error_boundary import clean_request_id
from depthserve.gateway.metrics import GatewayMetrics
from depthserve.gateway.oip.grpc_status import grpc_status
from depthserve.gateway.oip.json_requests import check_request
from depthserve.gateway.oip.replies import with_raw_outputs
from depthserve.gateway.oip.service import OipService
from depthserve.gateway.oip.stream import answer_stream
from depthserve.protocol.reply_wire import InferResponse, add_inference_service, as_message
from depthserve.protocol.tensors import TensorError
from depthserve.settings import GatewaySettings
from depthserve.telemetry.logs import REQUEST_ID

T = TypeVar("T")
INFER_ROUTE = "/inference.GRPCInferenceService/ModelInfer"  # the metrics route label of gRPC inference
log = logging.getLogger("depthserve.gateway")


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            found[key.lower()] = value
    return found


def _peer_host(peer: str) -> str | None:
    """The client address of a gRPC peer string such as `ipv4:127.0.0.1:5000` or `ipv6:[::1]:5000`."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    return None


async def _abort(context: grpc.aio.ServicerContext, error: GatewayError) -> NoReturn:
    await context.abort(grpc_status(error), error.message)
    raise AssertionError("abort returned")  # pragma: no cover - abort always raises


class GatewayServicer(pb_grpc.GRPCInferenceServiceServicer):
    """Answers OIP gRPC calls at the gateway; model questions go to backends, inference is balanced."""

    def __init__(self, service: OipService, edge: Edge, metrics: GatewayMetrics | None = None) -> None:
        self._service = service
        self._edge = edge
        self._settings = service.settings
        self._metrics = metrics

    async def _answer(self, context: grpc.aio.ServicerContext, work: Awaitable[T], key: bool = True) -> T:
        """Run one call's work, checking the API key first; GatewayError becomes the matching gRPC status."""
        try:
            if key:
                self._edge.keys.authenticate(_metadata(context))
            return await work
        except GatewayError as error:
            if hasattr(work, "close"):
                work.close()  # never awaited when the key check failed
            await _abort(context, error)
        except Exception:  # noqa: BLE001 - the last line of defence: a clear INTERNAL, the server stays up
            log.exception("OIP gRPC call failed")
            await _abort(context, GatewayError(500, "internal", "internal gateway error"))

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._service.server_ready())

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        async def work() -> pb.ServerMetadataResponse:
            return self._service.server_metadata()

        return await self._answer(context, work())

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        async def work() -> pb.ModelReadyResponse:
            return pb.ModelReadyResponse(ready=await self._service.model_ready(request.name, request.version))

        return await self._answer(context, work())

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        return await self._answer(context, self._service.model_metadata(request.name, request.version))

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelConfigResponse:
        async def work() -> pb.ModelConfigResponse:
            config = await self._service.model_config(request.name, request.version)
            return pb.ModelConfigResponse(config=json_format.ParseDict(config, model_config_pb2.ModelConfig()))

        return await self._answer(context, work())

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelStatisticsResponse:
        async def work() -> pb.ModelStatisticsResponse:
            stats = await self._service.statistics(request.name, request.version)
            return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

        return await self._answer(context, work())

    def _timeout(self, context: grpc.aio.ServicerContext) -> float:
        """The client's gRPC deadline (capped), or the gateway's default when it set none."""
        remaining = context.time_remaining()
        if remaining is None:
            return self._settings.request_timeout_s
        return min(remaining, self._settings.max_request_timeout_s)

    async def _forward(
        self,
        request: pb.ModelInferRequest,
        headers: dict[str, str],
        peer: str | None,
        request_id: str,
        timeout_s: float,
    ) -> tuple[InferResponse, str]:
        """Check, admit and dispatch one inference like a REST one, counting it in the gateway's metrics."""
        started = time.perf_counter()
        status, backend = 500, ""

        async def build(lease: UploadLease) -> pb.ModelInferRequest:
            lease.add(request.ByteSize())  # gRPC read the message already: count it like a REST body
            lease.received()
            return request

        try:
            try:
                check_request(request)
            except TensorError as exc:
                raise GatewayError(400, "invalid_request", str(exc)) from None
            reply, backend = await self._service.infer(
                request.model_name, request.model_version, headers, peer, request_id, timeout_s, build
            )
            try:
                response = with_raw_outputs(reply)
            except TensorError as exc:
                raise GatewayError(502, "backend_error", f"backend {backend}: {exc}") from None
            status = 200
            return response, backend
        except GatewayError as error:
            status = error.status
            raise
        finally:
            if self._metrics is not None:  # counted with the HTTP routes, by its gRPC method path
                self._metrics.observe(INFER_ROUTE, request.model_name, status, backend, time.perf_counter() - started)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> InferResponse:
        headers = _metadata(context)
        request_id = clean_request_id(headers.get("x-request-id", ""))
        REQUEST_ID.set(request_id)  # every log line about this request carries its id

        async def work() -> InferResponse:
            response, backend = await self._forward(
                request, headers, _peer_host(context.peer()), request_id, self._timeout(context)
            )
            context.set_trailing_metadata((("x-request-id", request_id), ("x-backend", backend)))
            return response

        return await self._answer(context, work(), key=False)  # the forwarder checks the key

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[pb.ModelInferRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        """Triton's streaming inference: a window of requests per stream runs at once (`oip_stream`), replies as ready.

        A failed request answers with `error_message` on the stream, which stays open (Triton's rule).
        """
        headers = _metadata(context)
        peer = _peer_host(context.peer())

        async def one(request: pb.ModelInferRequest) -> pb.ModelStreamInferResponse:
            request_id = clean_request_id(request.id or headers.get("x-request-id", ""))
            REQUEST_ID.set(request_id)
            try:
                reply, _ = await self._forward(request, headers, peer, request_id, self._settings.request_timeout_s)
                response = as_message(reply)  # its id is changed below
                response.id = request.id
                return pb.ModelStreamInferResponse(infer_response=response)
            except Exception as exc:  # noqa: BLE001 - every failure becomes an error reply on the stream
                if not isinstance(exc, GatewayError):
                    log.exception("OIP stream request failed")
                message = exc.message if isinstance(exc, GatewayError) else "internal gateway error"
                empty = pb.ModelInferResponse(
                    id=request.id, model_name=request.model_name, model_version=request.model_version
                )
                return pb.ModelStreamInferResponse(error_message=message, infer_response=empty)

        async with contextlib.aclosing(answer_stream(request_iterator, one)) as replies:
            async for reply in replies:
                yield reply


def _server_credentials(settings: GatewaySettings) -> grpc.ServerCredentials | None:
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    return grpc.ssl_server_credentials([(settings.tls_key.read_bytes(), settings.tls_cert.read_bytes())])


async def start_grpc(service: OipService, edge: Edge, metrics: GatewayMetrics | None = None) -> grpc.aio.Server | None:
    """Start the OIP gRPC server on `--grpc-port` (TLS with the HTTP certificate, if any); None when not asked."""
    settings = service.settings
    port = settings.grpc_port
    if port is None:
        return None
    body_limit = int(settings.max_body_mb * 1024 * 1024)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", body_limit),
            ("grpc.max_send_message_length", settings.max_message_mb * 1024 * 1024),
            ("grpc.so_reuseport", 0),
        ],
        # Calls past what admission could hold are refused at once (RESOURCE_EXHAUSTED), never buffered.
        maximum_concurrent_rpcs=settings.max_in_flight + settings.max_queue,
    )
    add_inference_service(GatewayServicer(service, edge, metrics), server)  # a worker's reply passes as it came
    credentials = _server_credentials(settings)
    address = f"{settings.host}:{port}"
    secure = credentials is not None
    bound = server.add_secure_port(address, credentials) if secure else server.add_insecure_port(address)
    await server.start()
    log.info("OIP gRPC listening on %s:%d%s", settings.host, bound, " (TLS)" if secure else "")
    return server
