"""OIP v2 requests, REST JSON and gRPC, into the messages the backends speak; pure, and strict about what it accepts.

Every input becomes `raw_input_contents` (the wire form tritonclient and our workers use), whether it
came as JSON `data` or as binary; datatype and shape are checked against the data before a backend
sees it. Replies go the other way in `oip_replies`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.oip.binary import BINARY_SIZE
from depthserve.protocol.tensors import (
    DATATYPES,
    MAX_BYTES_ELEMENTS,
    TensorError,
    check_bytes_count,
    element_count,
    serialize_bytes,
)

MAX_NAME_BYTES = 256  # model, version, tensor and parameter names: longer ones are refused, never echoed whole
# A backend may quote a bad parameter in its error; past ~16 KB that error no longer fits gRPC metadata and
# comes back as RESOURCE_EXHAUSTED, which the gateway retries. String parameters are settings, not payloads.
MAX_PARAM_BYTES = 4096
_unpack_prefix = struct.Struct("<I").unpack_from
_SHOWN = 80  # characters of a client's value quoted back in an error message
ITEM_SIZES = {**{name: dtype.itemsize for name, dtype in DATATYPES.items()}, "BF16": 2}
KNOWN_TYPES = (*DATATYPES, "BF16", "BYTES")
BINARY_OUTPUT = "binary_data_output"


@dataclass(frozen=True)
class OutputChoice:
    """Which outputs the client asked for (None: all) and which of them travel as binary."""

    requested: dict[str, bool] | None
    binary_default: bool


def shown(value: Any) -> str:
    """Quote a client's value in an error message, cut short so a huge value cannot make a huge message."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else f"<{value.bit_length()}-bit integer>"
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


def check_name(value: Any, what: str) -> str:
    """Refuse a name that is not a non-empty string of at most MAX_NAME_BYTES UTF-8 bytes."""
    if not isinstance(value, str) or not value:
        raise TensorError(f"{what} must be a non-empty string")
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise TensorError(f"{what} {shown(value)} is not valid Unicode (a lone surrogate)") from None
    if size > MAX_NAME_BYTES:
        raise TensorError(f"{what} {shown(value)} is {size} bytes long; at most {MAX_NAME_BYTES} are accepted")
    return value


def _shape(tensor: dict[str, Any], name: str) -> list[int]:
    shape = tensor.get("shape")
    if not isinstance(shape, list) or any(isinstance(d, bool) or not isinstance(d, int) for d in shape):
        raise TensorError(f"input {name!r}: shape must be a list of integers, got {shown(shape)}")
    try:
        element_count(shape)  # refuses negative, huge and too many dimensions
    except TensorError as exc:
        raise TensorError(f"input {name!r}: {exc}") from None
    return shape


def _datatype(tensor: dict[str, Any], name: str) -> str:
    datatype = tensor.get("datatype")
    if not isinstance(datatype, str) or datatype not in KNOWN_TYPES:
        raise TensorError(
            f"input {name!r}: unknown datatype {shown(datatype)}; expected one of {', '.join(KNOWN_TYPES)}"
        )
    return datatype


def count_bytes_elements(raw: bytes | memoryview, limit: int = MAX_BYTES_ELEMENTS) -> int:
    """Count the length-prefixed elements of a BYTES tensor without copying them, refusing a truncated one.

    The scan is a Python loop (about 0.17 s per million elements), so it stops past `limit` elements.
    """
    view = memoryview(raw)
    end = len(view)
    offset = count = size = 0
    while offset < end:
        if count >= limit:
            raise TensorError(f"BYTES tensor holds more than {limit} elements")
        if end - offset < 4:
            raise TensorError("BYTES tensor ends inside a length prefix")
        size = _unpack_prefix(view, offset)[0]
        offset += 4 + size
        count += 1
    if offset > end:
        raise TensorError(f"BYTES element of {size} bytes runs past the end of the tensor")
    return count


def check_raw(name: str, datatype: str, shape: list[int], raw: bytes | memoryview) -> None:
    """Check that raw contents hold exactly the elements their shape and datatype say."""
    count = element_count(shape)
    if datatype == "BYTES":
        check_bytes_count(len(raw), count)  # bounds the scan below, before it starts
        try:
            found = count_bytes_elements(raw, count)
        except TensorError as exc:
            raise TensorError(f"input {name!r}: {exc}; shape {shape} needs {count}") from None
        if found != count:
            raise TensorError(f"input {name!r}: BYTES data holds {found} elements, shape {shape} needs {count}")
        return
    expected = count * ITEM_SIZES[datatype]
    if len(raw) != expected:
        raise TensorError(f"input {name!r}: shape {shape} of {datatype} needs {expected} bytes, got {len(raw)}")


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def json_data_to_raw(name: str, datatype: str, shape: list[int], data: Any) -> bytes:
    """Turn a JSON `data` value (flat or nested, row-major) into raw little-endian contents."""
    count = element_count(shape)
    if datatype == "BF16":
        raise TensorError(f"input {name!r}: BF16 has no JSON form; send it as binary data")
    if datatype == "BYTES":
        items = _flatten(data)
        if not all(isinstance(item, str) for item in items):
            raise TensorError(f"input {name!r}: BYTES data must be strings")
        if len(items) != count:
            raise TensorError(f"input {name!r}: {len(items)} elements given, shape {shape} needs {count}")
        return serialize_bytes([item.encode() for item in items])
    try:
        array = np.asarray(data)
    except (ValueError, OverflowError) as exc:
        raise TensorError(f"input {name!r}: data is not a regular array of numbers ({exc})") from None
    if array.size != count:
        raise TensorError(f"input {name!r}: {array.size} elements given, shape {shape} needs {count}")
    dtype = DATATYPES[datatype]
    if count and not _kind_fits(array.dtype.kind, dtype.kind):
        raise TensorError(f"input {name!r}: data of kind {array.dtype} does not fit datatype {datatype}")
    if count and dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = array.min(), array.max()
        if low < info.min or high > info.max:
            raise TensorError(f"input {name!r}: values {low}..{high} out of range for {datatype}")
    return np.ascontiguousarray(array, dtype=dtype).tobytes()


def _kind_fits(given: str, wanted: str) -> bool:
    if wanted == "b":
        return given == "b"
    if wanted in "iu":
        return given in "iu"
    return given in "iuf"  # floats accept integers


def _json_to_param(name: str, value: Any, target: pb.InferParameter) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise TensorError(f"parameter {name!r}: integer {shown(value)} does not fit int64")
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    elif isinstance(value, str):
        _check_string_param(name, value)
        target.string_param = value
    else:
        raise TensorError(f"parameter {name!r} must be a boolean, number or string")


def _check_string_param(name: str, value: str) -> None:
    size = len(value.encode())
    if size > MAX_PARAM_BYTES:
        raise TensorError(f"parameter {name!r} is {size} bytes long; at most {MAX_PARAM_BYTES} are accepted")


def _check_grpc_params(params: Any, where: str) -> None:
    for key, value in params.items():
        check_name(key, f"{where}: parameter name")
        if value.WhichOneof("parameter_choice") == "string_param":
            _check_string_param(key, value.string_param)


def _copy_params(params: Any, target: Any, skip: tuple[str, ...], where: str) -> None:
    if params is None:
        return
    if not isinstance(params, dict):
        raise TensorError(f"{where}: parameters must be an object")
    for key, value in params.items():
        if key not in skip:
            _json_to_param(check_name(key, f"{where}: parameter name"), value, target[key])


def _output_choice(doc: dict[str, Any], request: pb.ModelInferRequest) -> OutputChoice:
    params = doc.get("parameters") or {}
    default = params.get(BINARY_OUTPUT, False) if isinstance(params, dict) else False
    if not isinstance(default, bool):
        raise TensorError("parameter 'binary_data_output' must be a boolean")
    outputs = doc.get("outputs")
    if outputs is None:
        return OutputChoice(None, default)
    if not isinstance(outputs, list):
        raise TensorError("'outputs' must be a list")
    requested: dict[str, bool] = {}
    for item in outputs:
        if not isinstance(item, dict):
            raise TensorError("each requested output must be an object")
        name = check_name(item.get("name"), "output name")
        params = item.get("parameters") or {}
        binary = params.get("binary_data", default) if isinstance(params, dict) else default
        if not isinstance(binary, bool):
            raise TensorError(f"output {name!r}: binary_data must be a boolean")
        requested[name] = binary
        tensor = request.outputs.add(name=name)
        _copy_params(item.get("parameters"), tensor.parameters, ("binary_data",), f"output {name!r}")
    return OutputChoice(requested, default)


def parse_infer_request(
    doc: dict[str, Any], binary: list[memoryview | None], model: str, version: str
) -> tuple[pb.ModelInferRequest, OutputChoice]:
    """Build the ModelInferRequest for a REST infer body whose binary slices were already split off."""
    request, raws, choice = parse_infer_parts(doc, binary, model, version)
    request.raw_input_contents.extend(bytes(raw) for raw in raws)
    return request, choice


def parse_infer_parts(
    doc: dict[str, Any], binary: list[memoryview | None], model: str, version: str
) -> tuple[pb.ModelInferRequest, list[bytes | memoryview], OutputChoice]:
    """Like parse_infer_request, but leave the raw contents (one per input, uncopied) out of the message."""
    try:
        return _parse_infer_request(doc, binary, model, version)
    except UnicodeEncodeError:  # a JSON string with a lone surrogate has no UTF-8 form for protobuf
        raise TensorError("request strings must be valid Unicode: a lone surrogate has no UTF-8 form") from None


def _parse_infer_request(
    doc: dict[str, Any], binary: list[memoryview | None], model: str, version: str
) -> tuple[pb.ModelInferRequest, list[bytes | memoryview], OutputChoice]:
    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise TensorError("'inputs' must be a non-empty list")
    request_id = doc.get("id", "")
    if not isinstance(request_id, str):
        raise TensorError("'id' must be a string")
    request = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    _copy_params(doc.get("parameters"), request.parameters, (BINARY_OUTPUT,), "request")
    seen: set[str] = set()
    raws: list[bytes | memoryview] = []
    for tensor, raw in zip(inputs, binary, strict=True):
        if not isinstance(tensor, dict):
            raise TensorError("each input must be an object")
        name = check_name(tensor.get("name"), "input name")
        if name in seen:
            raise TensorError(f"input {name!r} given twice")
        seen.add(name)
        datatype, shape = _datatype(tensor, name), _shape(tensor, name)
        has_data = "data" in tensor
        if raw is not None and has_data:
            raise TensorError(f"input {name!r} has both JSON data and binary_data_size")
        if raw is None and not has_data:
            raise TensorError(f"input {name!r} has no data: give 'data' or binary_data_size")
        if raw is not None:
            check_raw(name, datatype, shape, raw)
            contents: bytes | memoryview = raw
        else:
            contents = json_data_to_raw(name, datatype, shape, tensor["data"])
        target = request.inputs.add(name=name, datatype=datatype, shape=shape)
        _copy_params(tensor.get("parameters"), target.parameters, (BINARY_SIZE, "binary_data"), f"input {name!r}")
        raws.append(contents)
    return request, raws, _output_choice(doc, request)


def check_request(request: pb.ModelInferRequest) -> None:
    """Check a gRPC ModelInferRequest's names, datatypes and raw sizes before any backend sees it."""
    if not request.model_name:
        raise TensorError("model_name is required")
    check_name(request.model_name, "model_name")
    if request.model_version:
        check_name(request.model_version, "model_version")
    _check_grpc_params(request.parameters, "request")
    for output in request.outputs:
        check_name(output.name, "output name")
        _check_grpc_params(output.parameters, f"output {output.name!r}")
    if not request.inputs:
        raise TensorError("a request needs at least one input")
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise TensorError(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs; give one per input")
    for index, tensor in enumerate(request.inputs):
        check_name(tensor.name, "input name")
        _check_grpc_params(tensor.parameters, f"input {tensor.name!r}")
        if tensor.datatype not in KNOWN_TYPES:
            raise TensorError(
                f"input {tensor.name!r}: unknown datatype {shown(tensor.datatype)}; "
                f"expected one of {', '.join(KNOWN_TYPES)}"
            )
        shape = list(tensor.shape)
        try:
            element_count(shape)
        except TensorError as exc:
            raise TensorError(f"input {tensor.name!r}: {exc}") from None
        if raw:
            check_raw(tensor.name, tensor.datatype, shape, raw[index])
