"""The depth model's named tensors and parameters on the OIP v2 wire, built and parsed in one place."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from depthserve.protocol.tensors import (
    TensorError,
    array_from_raw,
    array_to_raw,
    deserialize_bytes,
    element_count,
    serialize_bytes,
)

if TYPE_CHECKING:
    from depthserve.protocol.reply_wire import InferResponse

IMAGE, DEPTH, INTRINSICS = "image", "depth", "intrinsics"
MASK, POINTS, RESULT = "mask", "points", "result"
OUTPUT_FORMATS = ("raw", "npy", "png16", "preview", "ply")
DEFAULT_RESOLUTION_LEVEL = 9
CONTENT_TYPE_PARAM = "content_type"
PRIORITY_PARAM = "priority"
HIGH_PRIORITY = 1  # Triton's numbering: 0 the default, 1 the highest level, larger numbers served later
LOW_PRIORITY = 2


@dataclass(frozen=True)
class DepthInputs:
    """One depth request as the worker sees it: still-encoded files stay bytes until a thread decodes them."""

    image: bytes | np.ndarray
    depth: bytes | np.ndarray | None = None
    intrinsics: np.ndarray | None = None
    resolution_level: int = DEFAULT_RESOLUTION_LEVEL
    num_tokens: int | None = None
    output_format: str = "raw"
    apply_mask: bool = True


def _param_value(param: pb.InferParameter) -> object:
    kind = param.WhichOneof("parameter_choice")
    return None if kind is None else getattr(param, kind)


def _int_param(params: dict[str, object], name: str, default: int | None) -> int | None:
    value = params.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TensorError(f"parameter {name!r} must be an integer")
    return value


def _parse_options(request: pb.ModelInferRequest) -> dict[str, object]:
    params = {name: _param_value(p) for name, p in request.parameters.items()}
    level = _int_param(params, "resolution_level", DEFAULT_RESOLUTION_LEVEL)
    if level is None or not 0 <= level <= 9:
        raise TensorError(f"resolution_level must be between 0 and 9, got {level}")
    num_tokens = _int_param(params, "num_tokens", None)
    if num_tokens is not None and num_tokens < 1:  # the upper bound is the model's: the worker checks its range
        raise TensorError(f"num_tokens must be a positive integer, got {num_tokens}")
    output_format = params.get("format", "raw")
    if output_format not in OUTPUT_FORMATS:
        raise TensorError(f"format must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}")
    apply_mask = params.get("apply_mask", True)
    if not isinstance(apply_mask, bool):
        raise TensorError("parameter 'apply_mask' must be a boolean")
    return {
        "resolution_level": level,
        "num_tokens": num_tokens,
        "output_format": output_format,
        "apply_mask": apply_mask,
    }


def request_priority(request: pb.ModelInferRequest) -> int:
    """The request's `priority` parameter (0 absent), numbered as Triton does; TensorError unless an integer >= 0."""
    param = request.parameters.get(PRIORITY_PARAM)
    if param is None:
        return 0
    value = _param_value(param)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TensorError(f"parameter 'priority' must be an integer >= 0 (1 highest, {LOW_PRIORITY}+ low): {value!r}")
    return value


def set_priority(request: pb.ModelInferRequest, priority: int) -> None:
    """Mark a request with a Triton-style priority (`LOW_PRIORITY` for work that may wait, as video frames,
    `HIGH_PRIORITY` for the front of the worker's queue)."""
    request.parameters[PRIORITY_PARAM].int64_param = priority


def _read_input(tensor: pb.ModelInferRequest.InferInputTensor, raw: bytes) -> bytes | np.ndarray:
    shape = list(tensor.shape)
    if tensor.datatype == "BYTES":
        elements = deserialize_bytes(raw, element_count(shape))
        if len(elements) != 1:
            raise TensorError(f"input {tensor.name!r} must hold exactly one encoded file, got {len(elements)}")
        return elements[0]
    return array_from_raw(raw, tensor.datatype, shape)


def parse_request(request: pb.ModelInferRequest) -> DepthInputs:
    """Turn a ModelInferRequest into DepthInputs, raising TensorError with a client-facing message."""
    if len(request.raw_input_contents) != len(request.inputs):
        raise TensorError("send every input in raw_input_contents (one entry per input)")
    found: dict[str, bytes | np.ndarray] = {}
    for tensor, raw in zip(request.inputs, request.raw_input_contents, strict=True):
        if tensor.name not in (IMAGE, DEPTH, INTRINSICS):
            raise TensorError(f"unknown input {tensor.name!r}; expected image, depth, intrinsics")
        if tensor.name in found:
            raise TensorError(f"input {tensor.name!r} given twice")
        found[tensor.name] = _read_input(tensor, raw)
    if IMAGE not in found:
        raise TensorError("input 'image' is required")
    image = found[IMAGE]
    if isinstance(image, np.ndarray) and (image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3):
        raise TensorError(f"image tensor must be UINT8 [H,W,3], got {image.dtype} {list(image.shape)}")
    depth = found.get(DEPTH)
    if isinstance(depth, np.ndarray) and (depth.dtype != np.float32 or depth.ndim != 2):
        raise TensorError(f"depth tensor must be FP32 [H,W] in metres, got {depth.dtype} {list(depth.shape)}")
    intrinsics = found.get(INTRINSICS)
    if intrinsics is not None and (
        not isinstance(intrinsics, np.ndarray) or intrinsics.shape != (3, 3) or intrinsics.dtype != np.float32
    ):
        raise TensorError("intrinsics must be an FP32 [3,3] tensor")
    options = _parse_options(request)
    return DepthInputs(image=image, depth=depth, intrinsics=intrinsics, **options)  # type: ignore[arg-type]


def _add_input(request: pb.ModelInferRequest, name: str, value: bytes | np.ndarray) -> None:
    tensor = request.inputs.add()
    tensor.name = name
    if isinstance(value, (bytes, bytearray, memoryview)):
        tensor.datatype = "BYTES"
        tensor.shape.append(1)
        request.raw_input_contents.append(serialize_bytes([bytes(value)]))
    else:
        datatype, shape, raw = array_to_raw(value)
        tensor.datatype = datatype
        tensor.shape.extend(shape)
        request.raw_input_contents.append(raw)


def build_request(
    model: str,
    inputs: DepthInputs,
    request_id: str = "",
    model_version: str = "",
) -> pb.ModelInferRequest:
    """Build the ModelInferRequest that carries DepthInputs; encoded files travel as BYTES."""
    request = pb.ModelInferRequest(model_name=model, model_version=model_version, id=request_id)
    _add_input(request, IMAGE, inputs.image)
    if inputs.depth is not None:
        _add_input(request, DEPTH, inputs.depth)
    if inputs.intrinsics is not None:
        _add_input(request, INTRINSICS, np.asarray(inputs.intrinsics, dtype=np.float32))
    request.parameters["resolution_level"].int64_param = inputs.resolution_level
    request.parameters["format"].string_param = inputs.output_format
    if inputs.num_tokens is not None:
        request.parameters["num_tokens"].int64_param = inputs.num_tokens
    if not inputs.apply_mask:
        request.parameters["apply_mask"].bool_param = False
    return request


def build_raw_response(model: str, request_id: str, outputs: dict[str, np.ndarray]) -> pb.ModelInferResponse:
    """Build a response with raw output tensors (depth, mask, points), as OIP clients expect by default."""
    response = pb.ModelInferResponse(model_name=model, id=request_id)
    for name, array in outputs.items():
        datatype, shape, raw = array_to_raw(array)
        tensor = response.outputs.add()
        tensor.name = name
        tensor.datatype = datatype
        tensor.shape.extend(shape)
        response.raw_output_contents.append(raw)
    return response


def build_encoded_response(model: str, request_id: str, data: bytes, content_type: str) -> pb.ModelInferResponse:
    """Build a response carrying one encoded file (npy, PNG, PLY) so the gateway can pass it through."""
    response = pb.ModelInferResponse(model_name=model, id=request_id)
    tensor = response.outputs.add()
    tensor.name = RESULT
    tensor.datatype = "BYTES"
    tensor.shape.append(1)
    response.raw_output_contents.append(serialize_bytes([data]))
    response.parameters[CONTENT_TYPE_PARAM].string_param = content_type
    return response


def encoded_result(response: InferResponse) -> tuple[bytes | memoryview, str]:
    """The encoded file and its media type, as a view into a WireReply (no copy) or bytes from a message."""
    for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=False):
        if tensor.name == RESULT:
            if len(raw) < 4 or struct.unpack_from("<I", raw)[0] != len(raw) - 4:
                (data,) = deserialize_bytes(raw, 1)  # raises TensorError with the reason
                return data, _content_type(response)
            return raw[4:], _content_type(response)
    raise TensorError("response has no 'result' output")


def _content_type(response: InferResponse) -> str:
    params = response.parameters
    found = params[CONTENT_TYPE_PARAM].string_param if CONTENT_TYPE_PARAM in params else ""
    return found or "application/octet-stream"


def read_encoded_result(response: InferResponse) -> tuple[bytes, str]:
    """Take the encoded file and its media type out of a response built by build_encoded_response."""
    data, content_type = encoded_result(response)
    return bytes(data), content_type


def read_raw_outputs(response: InferResponse) -> dict[str, np.ndarray]:
    """Read every fixed-size output tensor of a response into arrays keyed by name."""
    outputs: dict[str, np.ndarray] = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        outputs[tensor.name] = array_from_raw(raw, tensor.datatype, list(tensor.shape))
    return outputs
