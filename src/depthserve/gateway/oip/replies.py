"""OIP v2 replies from any backend into REST JSON (and raw contents for gRPC clients); pure.

Replies are read from raw or typed contents, so any OIP backend works; a reply that does not hold
together is a ReplyError, which the routes answer as 502 (the backend's fault, not the client's).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.oip.binary import BINARY_SIZE
from depthserve.gateway.oip.json_requests import OutputChoice
from depthserve.protocol.reply_wire import InferResponse, as_message
from depthserve.protocol.tensors import DATATYPES, TensorError, deserialize_bytes, element_count, serialize_bytes

_TYPED_FIELDS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


class ReplyError(TensorError):
    """A backend reply that does not hold together: the gateway's fault to report as 502, not the client's."""


def _param_json(param: pb.InferParameter) -> Any:
    kind = param.WhichOneof("parameter_choice")
    return None if kind is None else getattr(param, kind)


def _typed_to_raw(tensor: pb.ModelInferResponse.InferOutputTensor) -> bytes:
    field = _TYPED_FIELDS.get(tensor.datatype)
    if field is None:
        raise ReplyError(f"output {tensor.name!r} of datatype {tensor.datatype} came without raw contents")
    values = list(getattr(tensor.contents, field))
    if tensor.datatype == "BYTES":
        return serialize_bytes(values)
    try:
        return np.asarray(values, dtype=DATATYPES[tensor.datatype]).tobytes()
    except (OverflowError, ValueError):  # e.g. 300 in int_contents of an INT8 output
        raise ReplyError(f"output {tensor.name!r} has values out of range for {tensor.datatype}") from None


def output_contents(response: InferResponse) -> list[bytes | memoryview]:
    """Give each output's raw contents, from raw_output_contents or converted from typed contents."""
    if response.raw_output_contents:
        if len(response.raw_output_contents) != len(response.outputs):
            raise ReplyError("backend reply has raw contents for only some outputs")
        return list(response.raw_output_contents)
    return [_typed_to_raw(tensor) for tensor in response.outputs]


def with_raw_outputs(response: InferResponse) -> InferResponse:
    """Move typed output contents into raw_output_contents, the form tritonclient's gRPC client reads.

    A reply already in that form is passed on as it came (a WireReply: its bytes, unparsed and uncopied).
    """
    if response.raw_output_contents or not response.outputs:
        return response
    response = as_message(response)
    contents = output_contents(response)
    for tensor in response.outputs:
        tensor.ClearField("contents")
    response.raw_output_contents.extend(contents)
    return response


def _json_data(datatype: str, shape: list[int], raw: bytes | memoryview) -> list[Any] | None:
    """Give flat JSON data for raw contents, or None when it has no faithful JSON form (BF16, non-UTF-8)."""
    if datatype == "BF16":
        return None
    try:
        count = element_count(shape)
        if datatype == "BYTES":
            return [item.decode() for item in deserialize_bytes(raw, count)]
    except UnicodeDecodeError:
        return None
    except TensorError as exc:
        raise ReplyError(f"output of shape {shape}: {exc}") from None
    dtype = DATATYPES.get(datatype)
    if dtype is None:
        return None
    if len(raw) != count * dtype.itemsize:
        raise ReplyError(f"output of shape {shape} and datatype {datatype} has {len(raw)} bytes")
    return np.frombuffer(raw, dtype=dtype).tolist()


def infer_response_json(
    response: InferResponse, choice: OutputChoice
) -> tuple[dict[str, Any], list[bytes | memoryview]]:
    """Render a reply as the REST JSON header plus binary chunks, keeping only the outputs asked for."""
    contents = output_contents(response)
    by_name = {tensor.name: (tensor, raw) for tensor, raw in zip(response.outputs, contents, strict=True)}
    names = list(by_name) if choice.requested is None else list(choice.requested)
    outputs: list[dict[str, Any]] = []
    chunks: list[bytes | memoryview] = []
    for name in names:
        if name not in by_name:
            raise TensorError(f"requested output {name!r} is not in the model's reply (it has {', '.join(by_name)})")
        tensor, raw = by_name[name]
        shape = list(tensor.shape)
        item: dict[str, Any] = {"name": name, "datatype": tensor.datatype, "shape": shape}
        params = {key: _param_json(value) for key, value in tensor.parameters.items()}
        binary = choice.binary_default if choice.requested is None else choice.requested[name]
        data = None if binary else _json_data(tensor.datatype, shape, raw)
        if data is None:  # asked for binary, or no JSON form: binary, which every client reads
            params[BINARY_SIZE] = len(raw)
            chunks.append(raw)
        else:
            item["data"] = data
        if params:
            item["parameters"] = params
        outputs.append(item)
    header: dict[str, Any] = {"model_name": response.model_name, "outputs": outputs}
    if response.model_version:
        header["model_version"] = response.model_version
    if response.id:
        header["id"] = response.id
    if response.parameters:
        header["parameters"] = {key: _param_json(value) for key, value in response.parameters.items()}
    return header, chunks


def model_metadata_json(reply: pb.ModelMetadataResponse) -> dict[str, Any]:
    """Render ModelMetadata as the REST model metadata object."""

    def tensors(items: Any) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in items]

    return {
        "name": reply.name,
        "versions": list(reply.versions),
        "platform": reply.platform,
        "inputs": tensors(reply.inputs),
        "outputs": tensors(reply.outputs),
    }


def message_to_json(message: Message) -> dict[str, Any]:
    """Render a protobuf message as Triton's REST JSON does: field names as in the proto, 64-bit ints as numbers."""
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        out[field.name] = _field_json(field, value)
    return out


def _field_json(field: FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return {str(key): _scalar_json(value_field, item) for key, item in value.items()}
    if field.is_repeated:
        return [_scalar_json(field, item) for item in value]
    return _scalar_json(field, value)


def _scalar_json(field: FieldDescriptor, value: Any) -> Any:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return message_to_json(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.values_by_number[value].name
    if field.type == FieldDescriptor.TYPE_BYTES:
        return value.decode("latin-1")
    return value


def config_from_metadata(meta: pb.ModelMetadataResponse) -> dict[str, Any]:
    """Derive a Triton model config (REST JSON form) from model metadata, for backends without ModelConfig.

    `max_batch_size` 0: clients send one request per call; a depthserve worker batches on its own.
    """

    def tensors(items: Any) -> list[dict[str, Any]]:
        return [
            {
                "name": t.name,
                "data_type": "TYPE_STRING" if t.datatype == "BYTES" else f"TYPE_{t.datatype}",
                "dims": list(t.shape),
            }
            for t in items
        ]

    return {
        "name": meta.name,
        "platform": meta.platform,
        "backend": "",
        "max_batch_size": 0,
        "input": tensors(meta.inputs),
        "output": tensors(meta.outputs),
    }
