"""The one interface the gateway reaches a backend through, and the outcome of a failed call in our own words.

`GrpcTransport` is the only implementation that speaks gRPC (and the only code that reads gRPC status
codes); `depthserve.testing.fake_transport.FakeTransport` serves unit tests and the simulator. A failed
call raises `TransportError`, whose `Fault` says what went wrong independently of the wire: whether the
client's request was at fault, whether another backend may answer, whether the backend is to blame.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, TypeAlias

from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.errors import GatewayError
from depthserve.protocol.infer_wire import WireRequest
from depthserve.protocol.load_report import LoadReport
from depthserve.protocol.reply_wire import InferResponse

InferRequest: TypeAlias = pb.ModelInferRequest | WireRequest  # a WireRequest is already serialized


class Fault(enum.Enum):
    """Why a call to a backend failed, as the gateway acts on it (status and reason of the client's answer)."""

    INVALID_REQUEST = (400, "invalid_request")  # the request's fault: no retry, no blame
    NOT_FOUND = (404, "unknown_model")  # the backend does not serve that model or version
    TOO_LARGE = (413, "reply_too_large")  # the reply would not fit a message: too large from any backend
    BUSY = (503, "backend_overloaded")  # refused for load: another backend may take it, the backend is not sick
    UNAVAILABLE = (503, "backend_unavailable")  # no connection, reset or cancelled by the backend
    TIMEOUT = (504, "deadline")  # the call's deadline passed
    UNIMPLEMENTED = (502, "backend_error")  # the backend does not implement the call
    BROKEN = (502, "backend_error")  # anything else the backend answered

    @property
    def retriable(self) -> bool:
        """Whether another backend may still answer (a timeout is judged by the dispatcher, who set it)."""
        return self in (Fault.BUSY, Fault.UNAVAILABLE)

    @property
    def blames_backend(self) -> bool:
        """Whether the failure counts against the backend for outlier detection (a timeout: the dispatcher says)."""
        return self in (Fault.UNAVAILABLE, Fault.UNIMPLEMENTED, Fault.BROKEN)


@dataclass
class TransportError(Exception):
    """A call that failed: its fault, the backend's words, and the load report the failure carried (if any)."""

    fault: Fault
    details: str
    load: LoadReport | None = None

    def __str__(self) -> str:
        return f"{self.fault.name}: {self.details}"

    def error(self, address: str) -> GatewayError:
        """The answer a client gets: the backend's words for its own faults, naming the backend for the rest."""
        status, reason = self.fault.value
        if status in (400, 404, 413):
            return GatewayError(status, reason, self.details)
        retry_after = 1.0 if status == 503 else None
        return GatewayError(status, reason, f"backend {address}: {self.details}", retry_after)


@dataclass(frozen=True)
class InferReply:
    """A backend's answer to one inference, with the load report that rode on it."""

    response: InferResponse  # a WireReply from a gRPC backend: its outputs are views of the reply's bytes
    load: LoadReport | None


class Transport(Protocol):
    """Calls on one backend; every method raises TransportError on failure and stops the call when cancelled."""

    async def infer(self, request: InferRequest, timeout_s: float, request_id: str) -> InferReply:
        """Run one inference within `timeout_s`."""
        ...

    async def health(self, timeout_s: float) -> bool:
        """Ask the backend's health service: True when SERVING, False when NOT_SERVING."""
        ...

    async def model_ready(self, model: str, version: str, timeout_s: float) -> bool:
        """Whether the backend says the model (and version) is ready."""
        ...

    async def model_metadata(self, model: str, version: str, timeout_s: float) -> pb.ModelMetadataResponse:
        """The model's OIP metadata as the backend reports it."""
        ...

    async def model_config(self, model: str, version: str, timeout_s: float) -> pb.ModelConfigResponse:
        """The model's Triton config (Fault.UNIMPLEMENTED from a backend without one)."""
        ...

    async def close(self) -> None:
        """Release the connection; no call is made afterwards."""
        ...
