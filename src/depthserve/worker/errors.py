"""Translate worker exceptions into gRPC status codes at one boundary, so clients get clear answers."""

from __future__ import annotations

import logging

import grpc

from depthserve.codec import CodecError, ReplyTooLarge
from depthserve.protocol.tensors import TensorError
from depthserve.worker.batch_budget import OutOfDeviceMemory
from depthserve.worker.decode import BadRequest
from depthserve.worker.device_queue import QueueFull
from depthserve.worker.memory_guard import MemoryFull

log = logging.getLogger("depthserve.worker")


class ModelNotFound(LookupError):
    """The request names a model or version this worker does not serve."""


class NotReady(RuntimeError):
    """The model is still loading or warming up, or the worker is draining."""


def _client_errors() -> tuple[type[Exception], ...]:
    errors: list[type[Exception]] = [TensorError, CodecError, BadRequest]
    try:  # torch-free module; absent only if the model package is trimmed out
        from depthserve.model.errors import ModelInputError

        errors.append(ModelInputError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


CLIENT_ERRORS = _client_errors()


MAX_MESSAGE_CHARS = 1024  # a status message may quote client input; metadata has a size limit


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """Map an exception to the status a client sees, its message cut short enough to fit gRPC metadata."""
    code, message = _status(exc)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 15] + " ... (shortened)"
    return code, message


# Answers that no other worker could improve on: the gateway never retries them, a job never re-runs them.
PERMANENT_CODES = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE})


def _status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """Unexpected exceptions are logged and reported as INTERNAL.

    A reply too large to send is OUT_OF_RANGE, not RESOURCE_EXHAUSTED (gRPC's own code for an oversized
    message), so the gateway answers 413 at once instead of "overloaded, retry" on another worker.
    """
    if isinstance(exc, ReplyTooLarge):
        return grpc.StatusCode.OUT_OF_RANGE, str(exc)
    if isinstance(exc, CLIENT_ERRORS):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, (QueueFull, MemoryFull, OutOfDeviceMemory)):
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)
    if isinstance(exc, ModelNotFound):
        return grpc.StatusCode.NOT_FOUND, str(exc)
    if isinstance(exc, NotReady):
        return grpc.StatusCode.UNAVAILABLE, str(exc)
    if isinstance(exc, TimeoutError):
        return grpc.StatusCode.DEADLINE_EXCEEDED, str(exc) or "deadline passed before the request ran"
    log.exception("request failed", exc_info=exc)
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}"
