"""The least a Python HTTP/2-to-gRPC forwarder can do, on granian's ASGI and RSGI interfaces.

Each app reads the body, wraps it in a ModelInfer request, calls the worker named in the `WORKER`
environment variable over grpc.aio, and returns the reply's bytes: no checks, no balancing, no
metrics. `bench/overhead_floor.py` runs them beside the real gateway to show the stack's floor.
"""

from __future__ import annotations

import os
from typing import Any

import grpc
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.protocol.depth_api import DepthInputs, build_request, read_encoded_result

_stub: list[Any] = []


def _connect() -> None:
    channel = grpc.aio.insecure_channel(os.environ["WORKER"], options=[("grpc.max_receive_message_length", 64 << 20)])
    _stub.append(pb_grpc.GRPCInferenceServiceStub(channel))


async def _forward(body: bytes) -> tuple[bytes, str]:
    reply = await _stub[0].ModelInfer(
        build_request("lingbot-depth", DepthInputs(image=body, output_format="npy")), timeout=10
    )
    return read_encoded_result(reply)


async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The ASGI forwarder (with the lifespan that opens its channel)."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] == "lifespan.startup":
            _connect()
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    data, media = await _forward(b"".join(chunks))
    headers = [(b"content-type", media.encode()), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class RsgiForwarder:
    """The RSGI forwarder: granian's own interface, without ASGI's message dictionaries."""

    def __rsgi_init__(self, loop: Any) -> None:
        _connect()

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        data, media = await _forward(await protocol())
        protocol.response_bytes(200, [("content-type", media)], data)


rsgi = RsgiForwarder()
