"""A backend in process, behind the gateway's Transport seam: scripted latency, faults, hangs and load reports.

Like httpx's MockTransport, it lets the dispatcher, retries, hedging, deadlines, health checks and
outlier ejection be tested without a worker process. It waits with `asyncio.sleep`, so on a
virtual-time loop (virtual_time.py) a test of a 10 s timeout takes no time and cannot race the machine.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from tritonclient.grpc import service_pb2 as pb

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.upstream.transport import Fault, InferReply, InferRequest, TransportError
from depthserve.protocol.load_report import LoadReport


@dataclass(frozen=True)
class Step:
    """One scripted answer: after `latency_s`, a reply, or the `fault`; `hang` never answers (until cancelled)."""

    latency_s: float = 0.0
    fault: Fault | None = None
    details: str = "scripted failure"
    hang: bool = False
    load: LoadReport | None = None


class FakeTransport:
    """Answers each call with the next scripted Step (then `default`), and counts what it saw."""

    def __init__(self, address: str = "fake:1", default: Step = Step(), serving: bool = True) -> None:
        self.address = address
        self.default = default
        self.script: deque[Step] = deque()
        self.serving = serving  # what the health service says
        self.health_step = Step()  # how a health check is answered (latency, fault, hang)
        self.calls: list[str] = []  # request ids, in the order the calls arrived
        self.in_flight = 0
        self.cancelled = 0
        self.health_checks = 0
        self.closed = False

    def then(self, *steps: Step) -> FakeTransport:
        """Queue answers for the next calls."""
        self.script.extend(steps)
        return self

    async def _answer(self, step: Step, timeout_s: float) -> None:
        if step.hang or step.latency_s >= timeout_s:
            await asyncio.sleep(timeout_s)
            raise TransportError(Fault.TIMEOUT, "Deadline Exceeded", step.load)
        await asyncio.sleep(step.latency_s)
        if step.fault is not None:
            raise TransportError(step.fault, step.details, step.load)

    async def infer(self, request: InferRequest, timeout_s: float, request_id: str) -> InferReply:
        """One inference, as the next step says."""
        step = self.script.popleft() if self.script else self.default
        self.calls.append(request_id)
        self.in_flight += 1
        try:
            await self._answer(step, timeout_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        return InferReply(pb.ModelInferResponse(model_name=request.model_name, id=request_id), step.load)

    async def health(self, timeout_s: float) -> bool:
        """The health service's answer, after `health_step`."""
        self.health_checks += 1
        await self._answer(self.health_step, timeout_s)
        return self.serving

    async def model_ready(self, model: str, version: str, timeout_s: float) -> bool:
        """Ready whenever serving."""
        return self.serving

    async def model_metadata(self, model: str, version: str, timeout_s: float) -> pb.ModelMetadataResponse:
        """A model with one image input and a depth output."""
        return pb.ModelMetadataResponse(name=model, versions=[version or "1"], platform="fake")

    async def model_config(self, model: str, version: str, timeout_s: float) -> pb.ModelConfigResponse:
        """No Triton config here, as an OIP server without the extension answers."""
        raise TransportError(Fault.UNIMPLEMENTED, "ModelConfig is not implemented")

    async def close(self) -> None:
        """Note the close."""
        self.closed = True


class FakeFleet:
    """A transport factory for BackendPool: one FakeTransport per address, kept for the test to script."""

    def __init__(self, default: Step = Step()) -> None:
        self.default = default
        self.transports: dict[str, FakeTransport] = {}

    def __call__(self, spec: BackendSpec) -> FakeTransport:
        transport = self.transports.get(spec.address)
        if transport is None or transport.closed:
            transport = self.transports[spec.address] = FakeTransport(spec.address, self.default)
        return transport

    def __getitem__(self, address: str) -> FakeTransport:
        return self.transports[address]

    def calls(self, addresses: Iterable[str] | None = None) -> dict[str, int]:
        """Calls each backend received."""
        return {a: len(t.calls) for a, t in self.transports.items() if addresses is None or a in addresses}
