"""Job errors, and the one boundary where redis-py and aio-pika failures become them.

JobError
 +-- BrokerUnavailable   the broker or the job store cannot be reached right now (retry later: 503)
 +-- JobNotFound         no such job, or its results expired (404)
 +-- JobConflict         the job is in a state that forbids the operation (409)
 +-- QuotaExceeded       the caller (429) or the whole store (503) holds as many jobs or bytes as allowed
 +-- ResultNotStored     a computed result did not fit the caller's or the store's byte limit (the job failed)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class JobError(Exception):
    """Base of every error the job package raises."""


class BrokerUnavailable(JobError):
    """The broker or the job store is unreachable or refused the operation; the caller may retry."""


class JobNotFound(JobError):
    """The job id is unknown or its record has expired."""


class JobConflict(JobError):
    """The job's state forbids the operation (cancel a running job, fetch the result of a queued one)."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class QuotaExceeded(JobError):
    """A new job would take the caller (`scope` "caller") or the whole store ("total") past a job limit."""

    def __init__(self, message: str, scope: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.scope = scope
        self.retry_after_s = retry_after_s


class ResultNotStored(JobError):
    """The result did not fit the stored-bytes limits; the store marked the job failed with this message."""


def _foreign_errors() -> tuple[type[BaseException], ...]:
    import aio_pika.exceptions
    import aiormq.exceptions
    import pamqp.exceptions
    import redis.exceptions

    return (
        redis.exceptions.RedisError,
        aiormq.exceptions.AMQPError,
        aio_pika.exceptions.AMQPException,
        aiormq.exceptions.ChannelInvalidStateError,  # a RuntimeError: the channel closed under us
        pamqp.exceptions.PAMQPException,
        ConnectionError,
        OSError,
    )


_FOREIGN: tuple[type[BaseException], ...] | None = None


@contextmanager
def broker_errors(what: str) -> Iterator[None]:
    """Turn redis-py, aio-pika and socket errors raised inside into BrokerUnavailable naming `what`."""
    global _FOREIGN
    if _FOREIGN is None:
        _FOREIGN = _foreign_errors()
    try:
        yield
    except JobError:
        raise
    except _FOREIGN as exc:
        raise BrokerUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
