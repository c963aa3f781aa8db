"""The Transport the gateway sees in the simulator: calls land on a SimWorker, on the loop's virtual clock.

The dispatcher, health checks and OIP paths call it exactly as they call GrpcTransport, and get the same
TransportErrors for the same conditions: a full queue is BUSY, a dead worker UNAVAILABLE, a hung or cut-off
one a TIMEOUT when the call's deadline passes, a warming one NOT_SERVING on health.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math

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


class Deadlines:
    """The deadlines of the calls waiting on one worker, with one timer for the earliest instead of one per call.

    Nearly every call is answered long before its deadline, and a timer made and cancelled per call was a
    good share of the simulator's time. Calls are kept by deadline (then by order sent); those already
    answered or cancelled are dropped when they reach the front. The timer is armed for the front's
    deadline; when it fires, every call due fails with a TIMEOUT, exactly at its deadline, in order sent.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, asyncio.Future[object]]] = []
        self._order = itertools.count()
        self._armed_at = math.inf

    def add(self, deadline: float, future: asyncio.Future[object]) -> None:
        """Fail `future` with a TIMEOUT at `deadline` unless it is done by then."""
        heap = self._heap
        while heap and heap[0][2].done():
            heapq.heappop(heap)
        heapq.heappush(heap, (deadline, next(self._order), future))
        if deadline < self._armed_at:
            self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        self._armed_at = deadline  # a timer armed for a later deadline fires early, finds nothing due, re-arms
        self._loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        heap, now = self._heap, self._loop.time()
        if now < self._armed_at:
            return  # superseded by a timer armed for an earlier deadline
        self._armed_at = math.inf
        while heap and (heap[0][0] <= now or heap[0][2].done()):
            future = heapq.heappop(heap)[2]
            if not future.done():
                future.set_exception(TransportError(Fault.TIMEOUT, "Deadline Exceeded"))
        if heap:
            self._arm(heap[0][0])


class SimTransport:
    """One simulated worker behind the transport seam."""

    def __init__(self, worker: SimWorker) -> None:
        self.worker = worker
        self._loop = asyncio.get_running_loop()
        self._deadlines = Deadlines(self._loop)
        self.closed = False

    async def _wait(self, future: asyncio.Future[object], timeout_s: float) -> object:
        """Wait for the worker's answer until the call's deadline, as gRPC would."""
        self._deadlines.add(self._loop.time() + timeout_s, future)
        return await future

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
        self._deadlines.add(self._loop.time() + timeout_s, future)  # as gRPC's deadline would
        report = await future
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
