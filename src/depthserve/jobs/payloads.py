"""What travels where: the broker message holds a job id; the request itself is stored by reference."""

from __future__ import annotations

import json

from tritonclient.grpc import service_pb2 as pb

from depthserve.protocol.depth_api import DepthInputs, build_request


def encode_payload(model: str, inputs: DepthInputs, job_id: str) -> bytes:
    """The stored payload: the very ModelInferRequest a synchronous request would send, serialised."""
    return build_request(model, inputs, request_id=job_id).SerializeToString()


def decode_payload(data: bytes) -> pb.ModelInferRequest:
    """Read a stored payload back into a ModelInferRequest."""
    request = pb.ModelInferRequest()
    request.ParseFromString(data)
    return request


def task_message(job_id: str) -> bytes:
    """The broker message body: small and self-describing."""
    return json.dumps({"id": job_id}).encode()


def read_task(body: bytes) -> str:
    """The job id in a broker message body; ValueError if the body is not one of ours."""
    try:
        job_id = json.loads(body)["id"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not a job message: {body[:80]!r}") from exc
    if not isinstance(job_id, str) or not job_id:
        raise ValueError(f"not a job message: {body[:80]!r}")
    return job_id
