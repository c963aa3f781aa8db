"""The OIP v2 `inference.GRPCInferenceService` of a worker: metadata, readiness and ModelInfer."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

import grpc
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve import __version__
from depthserve.protocol.depth_api import HIGH_PRIORITY, LOW_PRIORITY, parse_request, request_priority
from depthserve.protocol.reply_wire import InferResponse
from depthserve.telemetry.buckets import BucketCounts
from depthserve.telemetry.logs import REQUEST_ID
from depthserve.telemetry.tracing import active, span
from depthserve.worker.batching.batcher import Batcher
from depthserve.worker.encode import cheap_to_encode, encode_response
from depthserve.worker.errors import ModelNotFound, NotReady, status_for
from depthserve.worker.load import LoadReporter
from depthserve.worker.memory_guard import MemoryGuard
from depthserve.worker.runners.base import Runner

log = logging.getLogger("depthserve.worker")
MODEL_VERSION = "1"
_INPUTS = (("image", "BYTES", [-1]), ("depth", "FP32", [-1, -1]), ("intrinsics", "FP32", [3, 3]))
_OUTPUTS = (("depth", "FP32", [-1, -1]), ("mask", "BOOL", [-1, -1]), ("points", "FP32", [-1, -1, 3]))


@dataclass
class WorkerState:
    """What the servicer and the lifecycle share: readiness and request counters."""

    ready: bool = False
    draining: bool = False
    served: int = 0
    failed: int = 0
    computed: int = 0  # requests that reached the device (an expired one dropped in the queue never does)
    refused_not_ready: int = 0  # requests that arrived before the model was loaded and warm
    last_request_at: float = 0.0  # event-loop time of the newest ModelInfer, to tell when gateways stopped
    warmup_s: float = 0.0  # seconds the warm-up inferences took, after loading
    request_seconds: BucketCounts = field(default_factory=BucketCounts)  # successful ModelInfer times, for metrics

    def count_computed(self, items: int) -> None:
        """Count the requests of a batch that reached the device."""
        self.computed += items


def _request_id(context: grpc.aio.ServicerContext) -> str:
    """The gateway's `x-request-id` metadata, so worker logs name the same request as the gateway's."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id":
            return value if isinstance(value, str) else value.decode("latin-1")
    return ""


def _config_tensors(specs: tuple[tuple[str, str, list[int]], ...], kind: type[Any]) -> list[Any]:
    """The inputs or outputs of a Triton model config, from the same table as the metadata."""
    return [
        kind(name=n, data_type=mc.DataType.Value("TYPE_STRING" if d == "BYTES" else f"TYPE_{d}"), dims=s)
        for n, d, s in specs
    ]


def _tensor_metadata(specs: tuple[tuple[str, str, list[int]], ...]) -> list[pb.ModelMetadataResponse.TensorMetadata]:
    return [pb.ModelMetadataResponse.TensorMetadata(name=n, datatype=d, shape=s) for n, d, s in specs]


class InferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """Answers OIP calls for one model; every ModelInfer reply carries the worker's load report."""

    def __init__(
        self,
        model_name: str,
        runner: Runner,
        batcher: Batcher,
        state: WorkerState,
        reporter: LoadReporter,
        memory: MemoryGuard,
        version: str = MODEL_VERSION,
        max_reply_bytes: int | None = None,
    ) -> None:
        self._max_reply_bytes = max_reply_bytes  # gRPC's send limit: a larger reply is refused, never sent
        self._memory = memory
        self._name = model_name
        self._version = version  # the version this worker registers and answers for
        self._runner = runner
        self._batcher = batcher
        self._state = state
        self._reporter = reporter

    def _serves(self, name: str, version: str) -> bool:
        return name == self._name and version in ("", self._version)

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._state.ready and not self._state.draining)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        ready = self._state.ready and not self._state.draining and self._serves(request.name, request.version)
        return pb.ModelReadyResponse(ready=ready)

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="depthserve-worker", version=__version__, extensions=["depthserve-load"])

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        if not self._serves(request.name, request.version):
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"unknown model {request.name!r} version {request.version!r}"
            )
        return pb.ModelMetadataResponse(
            name=self._name,
            versions=[self._version],
            platform=self._runner.platform,
            inputs=_tensor_metadata(_INPUTS),
            outputs=_tensor_metadata(_OUTPUTS),
        )

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelConfigResponse:
        """A minimal Triton config (name, platform, tensors; no batch dimension): the worker batches on its own."""
        if not self._serves(request.name, request.version):
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"unknown model {request.name!r} version {request.version!r}"
            )
        config = mc.ModelConfig(
            name=self._name,
            platform=self._runner.platform,
            max_batch_size=0,
            input=_config_tensors(_INPUTS, mc.ModelInput),
            output=_config_tensors(_OUTPUTS, mc.ModelOutput),
        )
        return pb.ModelConfigResponse(config=config)

    async def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> InferResponse:
        started = time.perf_counter()
        request_id = _request_id(context)
        REQUEST_ID.set(request_id)  # each RPC runs in its own task, so this reaches only this request's logs
        try:
            carrier = dict(context.invocation_metadata() or ()) if active() else None
            with span("worker.infer", request_id, carrier):
                response = await self._infer(request, context)
        except asyncio.CancelledError:
            self._state.failed += 1
            log.debug("ModelInfer cancelled (the caller gave up)")
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is translated at this one boundary
            self._state.failed += 1
            code, message = status_for(exc)
            level = logging.WARNING if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN) else logging.DEBUG
            log.log(level, "ModelInfer failed: %s %s", code.name, message)
            await context.abort(code, message, trailing_metadata=self._reporter.metadata())
        self._state.served += 1
        elapsed = time.perf_counter() - started
        self._state.request_seconds.observe(elapsed)
        log.debug("ModelInfer ok in %.1f ms", elapsed * 1000.0, extra={"duration_ms": round(elapsed * 1000.0, 3)})
        context.set_trailing_metadata(self._reporter.metadata())
        return response

    async def _infer(self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext) -> InferResponse:
        return await self.infer(request, context.time_remaining())

    async def infer(self, request: pb.ModelInferRequest, remaining_s: float | None) -> InferResponse:
        """Run one request through decode, batcher, model and encode: gRPC calls and async jobs share this path."""
        if not self._serves(request.model_name, request.model_version):
            raise ModelNotFound(f"unknown model {request.model_name!r} version {request.model_version!r}")
        if not self._state.ready:
            self._state.refused_not_ready += 1
            raise NotReady("worker is not ready: the model is loading or warming up")
        self._state.last_request_at = asyncio.get_running_loop().time()
        inputs = parse_request(request)
        priority = request_priority(request)
        low = priority >= LOW_PRIORITY  # queued behind normal requests, within a bound
        if self._runner.cheap_prepare:
            prepared = self._runner.prepare(inputs)
        else:
            prepared = await asyncio.to_thread(self._runner.prepare, inputs)
        need = self._memory.estimate(prepared.height, prepared.width)
        self._memory.reserve(need)
        try:
            deadline = None if remaining_s is None else self._batcher.clock() + remaining_s
            outputs = await self._batcher.run(prepared, deadline, low, priority == HIGH_PRIORITY)
        finally:
            self._memory.release(need)
        limit = self._max_reply_bytes
        if cheap_to_encode(prepared):
            return encode_response(self._name, request.id, outputs, prepared, limit)
        return await asyncio.to_thread(encode_response, self._name, request.id, outputs, prepared, limit)
