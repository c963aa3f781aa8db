"""The one broker interface the gateway publishes to and workers pull from, and `open_broker(url)`.

A message carries only the job id; the payload is in the job store. Delivery is at least once:
a message is acknowledged only after its job's result (or final failure) is stored, and one whose
consumer died is delivered again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class Delivery(ABC):
    """One delivered message: acknowledge it when done, dead-letter it when the job gave up."""

    job_id: str

    @abstractmethod
    async def ack(self) -> None:
        """The job's outcome is stored: the broker may forget the message."""

    @abstractmethod
    async def dead_letter(self, reason: str) -> None:
        """Move the message to the dead-letter queue (and off the main queue)."""

    @abstractmethod
    async def release(self) -> None:
        """Give the message back undone (the job store was unreachable), to be delivered again."""

    async def touch(self) -> None:  # noqa: B027 - only brokers with a visibility timeout need it
        """Say the job is still running, so the broker does not hand it to another consumer yet."""


class Broker(ABC):
    """A durable queue of job ids; implementations: Redis Streams, RabbitMQ, in-process."""

    kind: str
    durable: bool = True

    @abstractmethod
    async def start(self, prefetch: int | None = None) -> None:
        """Connect and declare; `prefetch` (consumers only) caps unacknowledged deliveries."""

    @abstractmethod
    async def publish(self, job_id: str) -> None:
        """Enqueue a job id; once this returns the broker has it durably (or it raised BrokerUnavailable)."""

    @abstractmethod
    async def fetch(self, max_count: int, wait_s: float) -> list[Delivery]:
        """Take up to `max_count` deliveries, waiting up to `wait_s` for the first."""

    @abstractmethod
    async def depth(self) -> int:
        """Messages in the queue not yet acknowledged (or, for RabbitMQ, not yet delivered)."""

    @abstractmethod
    async def dead_letters(self) -> list[str]:
        """Job ids in the dead-letter queue, oldest first (left there)."""

    @abstractmethod
    async def close(self) -> None:
        """Disconnect; unacknowledged deliveries go back to the queue."""

    async def destroy(self) -> None:  # noqa: B027 - only brokers with server-side state need it
        """Delete this namespace's queues (tests and benchmarks clean up with it)."""


def broker_kind(url: str | None) -> str:
    """Which implementation a broker URL selects: redis, amqp or in_process."""
    if not url:
        return "in_process"
    scheme = url.split("://", 1)[0].lower()
    if scheme in ("redis", "rediss", "unix"):
        return "redis"
    if scheme in ("amqp", "amqps"):
        return "amqp"
    raise ValueError(f"broker URL {url!r}: use redis://HOST:PORT/DB, amqp://USER:PASS@HOST:PORT/ or none")


def open_broker(url: str | None, namespace: str, visibility_timeout_s: float = 30.0) -> Broker:
    """Build (not yet connect) the broker a URL names; no URL gives the in-process broker."""
    kind = broker_kind(url)
    if kind == "redis":
        from depthserve.jobs.redis_streams import RedisStreamsBroker

        assert url is not None
        return RedisStreamsBroker(url, namespace, visibility_timeout_s)
    if kind == "amqp":
        from depthserve.jobs.rabbitmq import RabbitBroker

        assert url is not None
        return RabbitBroker(url, namespace)
    from depthserve.jobs.in_process import InProcessBroker

    return InProcessBroker()
