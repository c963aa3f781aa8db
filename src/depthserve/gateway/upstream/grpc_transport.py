"""The gRPC transport to one worker: its long-lived channel, and the one place gRPC status codes are read.

Every failed call becomes a `TransportError` here, the way httpx maps its transport's exceptions at
one boundary; nothing above this module knows gRPC exists.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.upstream.transport import Fault, InferReply, InferRequest, TransportError
from depthserve.protocol.load_report import from_metadata
from depthserve.protocol.reply_wire import inference_stub
from depthserve.telemetry.tracing import client_interceptors

# gRPC's default reconnect backoff grows to 120 s: a worker down for 10 s was redialled only ~6.5 s after it
# came back, and every health check failed meanwhile. Redial at least this often, like an active health check.
RECONNECT_BACKOFF_MAX_MS = 1_000
SERVING = health_pb2.HealthCheckResponse.SERVING
# gRPC's own words when a reply exceeds this gateway's receive limit (set below a worker's send limit).
_RECEIVED_TOO_LARGE = "Received message larger than max"
_FAULTS = {
    grpc.StatusCode.INVALID_ARGUMENT: Fault.INVALID_REQUEST,
    grpc.StatusCode.NOT_FOUND: Fault.NOT_FOUND,
    grpc.StatusCode.OUT_OF_RANGE: Fault.TOO_LARGE,  # a worker's reply would not fit a message
    grpc.StatusCode.RESOURCE_EXHAUSTED: Fault.BUSY,
    grpc.StatusCode.UNAVAILABLE: Fault.UNAVAILABLE,
    grpc.StatusCode.CANCELLED: Fault.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED: Fault.TIMEOUT,
    grpc.StatusCode.UNIMPLEMENTED: Fault.UNIMPLEMENTED,
}


@dataclass(frozen=True)
class UpstreamTls:
    """TLS to the workers: the CA that signs their certificates, and our client certificate for mutual TLS."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials, read from the files once."""
        cert = self.cert.read_bytes() if self.cert else None
        key = self.key.read_bytes() if self.key else None
        return grpc.ssl_channel_credentials(self.ca.read_bytes(), key, cert)


def channel_options(max_message_mb: int) -> list[tuple[str, int]]:
    """Raise message limits for images, keep idle channels alive through NATs and proxies, redial promptly."""
    limit = max_message_mb * 1024 * 1024
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS // 4),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS // 4),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
    ]


def transport_error(error: grpc.aio.AioRpcError) -> TransportError:
    """Translate a failed gRPC call, with the load report its trailing metadata carried."""
    code = error.code()
    details = error.details() or code.name
    fault = _FAULTS.get(code, Fault.BROKEN)
    if fault is Fault.BUSY and details.startswith(_RECEIVED_TOO_LARGE):
        fault = Fault.TOO_LARGE  # not overload: the same reply is too large from any worker
    return TransportError(fault, details, from_metadata(error.trailing_metadata()))


@asynccontextmanager
async def _translated() -> AsyncIterator[None]:
    try:
        yield
    except grpc.aio.AioRpcError as error:
        raise transport_error(error) from None


class GrpcTransport:
    """One channel to one worker for its whole life; OIP calls and gRPC health over it."""

    def __init__(self, address: str, max_message_mb: int, credentials: grpc.ChannelCredentials | None = None) -> None:
        options = channel_options(max_message_mb)
        interceptors = client_interceptors()  # none unless tracing is on
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
        else:
            self._channel = grpc.aio.secure_channel(address, credentials, options=options, interceptors=interceptors)
        self._stub = inference_stub(self._channel)  # ModelInfer also sends pre-serialized WireRequests as they are
        self._health = health_pb2_grpc.HealthStub(self._channel)

    async def infer(self, request: InferRequest, timeout_s: float, request_id: str) -> InferReply:
        """One ModelInfer; a cancelled caller cancels the call, so the worker stops too (a lost hedge)."""
        call = self._stub.ModelInfer(request, timeout=timeout_s, metadata=(("x-request-id", request_id),))
        try:
            async with _translated():
                response = await call
                return InferReply(response, from_metadata(await call.trailing_metadata()))
        except asyncio.CancelledError:
            call.cancel()
            raise

    async def health(self, timeout_s: float) -> bool:
        """gRPC health of the whole server (service "")."""
        async with _translated():
            reply = await self._health.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout_s)
        return bool(reply.status == SERVING)

    async def model_ready(self, model: str, version: str, timeout_s: float) -> bool:
        """OIP ModelReady."""
        async with _translated():
            reply = await self._stub.ModelReady(pb.ModelReadyRequest(name=model, version=version), timeout=timeout_s)
        return bool(reply.ready)

    async def model_metadata(self, model: str, version: str, timeout_s: float) -> pb.ModelMetadataResponse:
        """OIP ModelMetadata."""
        request = pb.ModelMetadataRequest(name=model, version=version)
        async with _translated():
            return await self._stub.ModelMetadata(request, timeout=timeout_s)

    async def model_config(self, model: str, version: str, timeout_s: float) -> pb.ModelConfigResponse:
        """Triton's ModelConfig."""
        async with _translated():
            return await self._stub.ModelConfig(pb.ModelConfigRequest(name=model, version=version), timeout=timeout_s)

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()
