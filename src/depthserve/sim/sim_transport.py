"""The Transport the gateway sees in the simulator: calls land on a SimWorker, on the loop's virtual clock.

The dispatcher, health checks and OIP paths call it exactly as they call GrpcTransport, and get the same
TransportErrors for the same conditions: a full queue is BUSY, a dead worker UNAVAILABLE, a hung or cut-off
one a TIMEOUT when the call's deadline passes, a warming one NOT_SERVING on health.
"""

from __future__ import annotations

import asyncio

from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.upstream.transport import Fault, InferReply, InferRequest, TransportError
from depthserve.protocol.depth_api import HIGH_PRIORITY, PRIORITY_PARAM
from depthserve.protocol.infer_wire import header_of
from depthserve.protocol.load_report import LoadReport
from depthserve.sim.worker_model import Job, SimWorker

REFUSED = "connection refused"
COST = "sim-cost"  # request parameters the simulator's requests carry: their cost and token grid
GRID = "sim-grid"


def _job_of(request: InferRequest) -> tuple[float, int, bool]:
    """The request's cost, token grid and whether it is priority 1 (the gateway's express slots)."""
    params = header_of(request).parameters
    cost = params[COST].double_param if COST in params else 1.0
    grid = params[GRID].int64_param if GRID in params else 0
    high = PRIORITY_PARAM in params and params[PRIORITY_PARAM].int64_param == HIGH_PRIORITY
    return cost, grid, high


class SimTransport:
    """One simulated worker behind the transport seam."""

    def __init__(self, worker: SimWorker) -> None:
        self.worker = worker
        self._loop = asyncio.get_running_loop()
        self.closed = False

    async def _wait(self, future: asyncio.Future[object], timeout_s: float) -> object:
        """Wait for the worker's answer until the call's deadline, as gRPC would."""
        loop = self._loop
        timer = loop.call_at(loop.time() + timeout_s, _expire, future)
        try:
            return await future
        finally:
            timer.cancel()

    async def infer(self, request: InferRequest, timeout_s: float, request_id: str) -> InferReply:
        """Queue the request at the worker and wait for its batch to finish."""
        worker = self.worker
        if worker.dead:
            raise TransportError(Fault.UNAVAILABLE, REFUSED)
        future: asyncio.Future[object] = self._loop.create_future()
        if not worker.cut_off:
            cost, grid, high = _job_of(request)
            if not worker.submit(Job(cost, grid, future, self._loop.time(), high), self._loop):
                raise TransportError(Fault.BUSY, "queue full", worker.report(self._loop.time()))
        report = await self._wait(future, timeout_s)
        assert isinstance(report, LoadReport)
        return InferReply(pb.ModelInferResponse(model_name=request.model_name, id=request_id), report)

    async def health(self, timeout_s: float) -> bool:
        """SERVING once warm; a hung or cut-off worker lets the check time out."""
        worker = self.worker
        if worker.dead:
            raise TransportError(Fault.UNAVAILABLE, REFUSED)
        if worker.hung or worker.cut_off:
            await self._wait(self._loop.create_future(), timeout_s)
        return self._loop.time() >= worker.ready_at

    async def model_ready(self, model: str, version: str, timeout_s: float) -> bool:
        """Ready when healthy."""
        return await self.health(timeout_s)

    async def model_metadata(self, model: str, version: str, timeout_s: float) -> pb.ModelMetadataResponse:
        """A minimal OIP description."""
        await self.health(timeout_s)
        return pb.ModelMetadataResponse(name=model, versions=[version or "1"], platform="depthserve_sim")

    async def model_config(self, model: str, version: str, timeout_s: float) -> pb.ModelConfigResponse:
        """No Triton config, as a real worker answers."""
        raise TransportError(Fault.UNIMPLEMENTED, "ModelConfig is not implemented")

    async def close(self) -> None:
        """Nothing to close."""
        self.closed = True


def _expire(future: asyncio.Future[object]) -> None:
    if not future.done():
        future.set_exception(TransportError(Fault.TIMEOUT, "Deadline Exceeded"))
