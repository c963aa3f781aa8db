"""The floor a worker is measured against: a bare grpc.aio ModelInfer server answering cached bytes.

It parses each request as a real server must (protobuf, the PNG's size from its header) and answers
the reply the synthetic worker would send for that size and format, built once and cached, so what
it costs per request is grpc.aio itself. With `tiny`, it runs the tiny model instead (decode, one
forward pass on one thread, npy out), as a bare server of that model would. `bench/cpu_cost.py` runs
it beside the worker.

    python bench/bare_grpc.py PORT [tiny]
"""

from __future__ import annotations

import struct
import sys
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from depthserve.codec import OUTPUT_FORMATS, encode_npy
from depthserve.protocol.depth_api import build_encoded_response, build_raw_response
from depthserve.protocol.tensors import deserialize_bytes
from depthserve.worker.runners.synthetic import _all_valid, plausible_depth

_replies: dict[tuple[int, int, str], bytes] = {}


_model: list[Any] = []


async def _reply(request: bytes, context: Any) -> bytes:
    message = pb.ModelInferRequest.FromString(request)
    (image,) = deserialize_bytes(message.raw_input_contents[0], 1)
    if _model:
        from depthserve.codec import decode_image
        from depthserve.model.runner import predict

        depth = predict(_model[0], decode_image(image))["depth"]
        return build_encoded_response(
            message.model_name, "", encode_npy(depth), "application/x-npy"
        ).SerializeToString()
    width, height = struct.unpack(">II", image[16:24])  # the PNG's IHDR
    fmt = message.parameters["format"].string_param if "format" in message.parameters else "raw"
    key = (width, height, fmt)
    if key not in _replies:
        depth = plausible_depth(height, width)
        if fmt == "npy":
            reply = build_encoded_response(message.model_name, "", encode_npy(depth), OUTPUT_FORMATS["npy"][0])
        else:
            reply = build_raw_response(message.model_name, "", {"depth": depth, "mask": _all_valid(height, width)})
        _replies[key] = reply.SerializeToString()
    return _replies[key]


async def serve(port: int) -> None:
    """Serve ModelInfer on 127.0.0.1:`port` until killed."""
    limit = 64 * 1024 * 1024
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit), ("grpc.so_reuseport", 0)])
    handler = grpc.unary_unary_rpc_method_handler(_reply)  # bytes in, bytes out: no (de)serializer
    service = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {"ModelInfer": handler})
    server.add_generic_rpc_handlers((service,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    import uvloop

    if sys.argv[2:] == ["tiny"]:
        import torch

        from depthserve.model import load_model

        torch.set_num_threads(1)
        torch.set_grad_enabled(False)
        _model.append(load_model("tiny"))
    uvloop.run(serve(int(sys.argv[1])))
