"""A minimal OIP v2 server that is not depthserve, so tests can show the gateway fronts any OIP backend.

Model `add` (version "7"): sums two INT32 tensors `a` and `b` of equal shape into `sum`, replying with
typed contents (`int_contents`), as servers other than Triton often do. Run it as
`python -m depthserve.testing.foreign_oip PORT`.
"""

from __future__ import annotations

import asyncio
import sys

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

MODEL, VERSION = "add", "7"


class AddServicer(pb_grpc.GRPCInferenceServiceServicer):
    """Serves the one `add` model; anything else is NOT_FOUND, a bad tensor INVALID_ARGUMENT."""

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=request.name == MODEL and request.version in ("", VERSION))

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(name="foreign", version="0")

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        if request.name != MODEL or request.version not in ("", VERSION):
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.name!r} here")
        tensor = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=MODEL,
            versions=[VERSION],
            platform="python",
            inputs=[tensor(name="a", datatype="INT32", shape=[-1]), tensor(name="b", datatype="INT32", shape=[-1])],
            outputs=[tensor(name="sum", datatype="INT32", shape=[-1])],
        )

    async def ModelInfer(
        self, request: pb.ModelInferRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelInferResponse:
        if request.model_name != MODEL:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model_name!r} here")
        arrays = {
            t.name: np.frombuffer(raw, dtype="<i4").reshape(tuple(t.shape))
            for t, raw in zip(request.inputs, request.raw_input_contents, strict=True)
            if t.datatype == "INT32"
        }
        if set(arrays) != {"a", "b"} or arrays["a"].shape != arrays["b"].shape:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "add needs INT32 inputs a and b of one shape")
        total = arrays["a"] + arrays["b"]
        response = pb.ModelInferResponse(model_name=MODEL, model_version=VERSION, id=request.id)
        output = response.outputs.add(name="sum", datatype="INT32", shape=list(total.shape))
        output.contents.int_contents.extend(total.ravel().tolist())
        return response


async def serve(port: int) -> None:
    """Serve until killed, with gRPC health SERVING like any well-behaved OIP server."""
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(AddServicer(), server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
