"""One worker as the gateway knows it: its long-lived gRPC channel and the gateway's own view of it."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import grpc
from grpc_health.v1 import health_pb2_grpc
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.balancer.types import BackendView
from depthserve.protocol.load_report import LoadReport

UNKNOWN, READY, UNREADY = "unknown", "ready", "unready"


@dataclass
class BackendStats:
    """Counters the dispatcher updates after each call; read by snapshots and /v1/cluster."""

    in_flight: int = 0
    served: int = 0
    errors: int = 0
    ewma_ms: float = 0.0
    consecutive_errors: int = 0


class Backend:
    """A worker address with one channel for its whole life, its health state and its stats."""

    def __init__(self, address: str, max_message_mb: int, ewma_alpha: float = 0.3) -> None:
        self.address = address
        limit = max_message_mb * 1024 * 1024
        self.channel = grpc.aio.insecure_channel(
            address,
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
                ("grpc.keepalive_time_ms", 10_000),
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.http2.max_pings_without_data", 0),
            ],
        )
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.state = UNKNOWN
        self.weight = 1.0
        self.stats = BackendStats()
        self.load: LoadReport | None = None
        self._alpha = ewma_alpha

    def started(self) -> None:
        """Count a call that is about to be sent."""
        self.stats.in_flight += 1

    def finished(self, ok: bool, latency_ms: float, load: LoadReport | None) -> None:
        """Record a call's outcome: latency into the EWMA, errors into the streak, the newest load report."""
        stats = self.stats
        stats.in_flight -= 1
        if load is not None:
            self.load = load
        if ok:
            stats.served += 1
            stats.consecutive_errors = 0
            stats.ewma_ms = (
                latency_ms if stats.ewma_ms == 0 else stats.ewma_ms + self._alpha * (latency_ms - stats.ewma_ms)
            )
        else:
            stats.errors += 1
            stats.consecutive_errors += 1

    def view(self) -> BackendView:
        """Freeze the current state into the immutable view a policy reads."""
        return BackendView(self.address, self.weight, self.stats.in_flight, self.stats.ewma_ms, load=self.load)

    def describe(self) -> dict[str, object]:
        """Summarise this backend for /v1/cluster."""
        return {
            "address": self.address,
            "state": self.state,
            **asdict(self.stats),
            "load": asdict(self.load) if self.load else None,
        }

    async def close(self) -> None:
        """Close the channel."""
        await self.channel.close()
