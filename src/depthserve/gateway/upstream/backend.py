"""One worker as the gateway knows it: its long-lived gRPC channel and the gateway's own view of it."""

from __future__ import annotations

from dataclasses import asdict

import grpc
from grpc_health.v1 import health_pb2_grpc

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.upstream.backend_health import BackendHealth
from depthserve.gateway.upstream.backend_stats import BackendStats
from depthserve.protocol.infer_wire import inference_stub
from depthserve.protocol.load_report import LoadReport
from depthserve.telemetry.tracing import client_interceptors

# gRPC's default reconnect backoff grows to 120 s: a worker down for 10 s was redialled only ~6.5 s after it
# came back, and every health check failed meanwhile. Redial at least this often, like an active health check.
RECONNECT_BACKOFF_MAX_MS = 1_000


def channel_options(max_message_mb: int) -> list[tuple[str, int]]:
    """Raise message limits for images, keep idle channels alive through NATs and proxies, redial promptly."""
    limit = max_message_mb * 1024 * 1024
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS // 4),
        ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS // 4),
        ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
    ]


class Backend:
    """A worker address with one channel for its whole life, its health state, stats and last load report."""

    def __init__(
        self,
        spec: BackendSpec,
        max_message_mb: int,
        stats: BackendStats,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.spec = spec
        self.address = spec.address
        options = channel_options(max_message_mb)
        interceptors = client_interceptors()  # none unless tracing is on
        if credentials is None:
            self.channel = grpc.aio.insecure_channel(spec.address, options=options, interceptors=interceptors)
        else:
            self.channel = grpc.aio.secure_channel(
                spec.address, credentials, options=options, interceptors=interceptors
            )
        self.stub = inference_stub(self.channel)  # ModelInfer also sends pre-serialized WireRequests as they are
        self.health_stub = health_pb2_grpc.HealthStub(self.channel)
        self.health = BackendHealth()
        self.stats = stats
        self.load: LoadReport | None = None
        self.load_at = float("-inf")  # gateway clock (monotonic) when the report arrived
        self.leaving = False  # discovery removed it: no new requests; closed once in-flight ones finish

    def record_load(self, load: LoadReport | None, now: float) -> None:
        """Keep the newest load report and when it arrived (the gateway's clock, immune to skew)."""
        if load is not None:
            self.load = load
            self.load_at = now
            self.stats.reported()

    def fresh_load(self, now: float, max_age_s: float) -> LoadReport | None:
        """Give the last report if it is younger than `max_age_s`; an older one means unknown, not idle."""
        return self.load if now - self.load_at <= max_age_s else None

    def describe(self, now: float, max_age_s: float, weight: float) -> dict[str, object]:
        """Summarise this backend for /v1/cluster."""
        age = now - self.load_at if self.load is not None else None
        spec = self.spec
        return {
            "address": self.address,
            "state": "leaving" if self.leaving else self.health.state(now),
            "model": spec.model,
            "version": spec.version,
            "source": spec.source,
            "id": spec.id,
            "hardware": spec.hardware,
            "times_ejected": self.health.times_ejected,
            "weight": round(weight, 3),
            "weight_mode": "auto" if self.spec.auto else "static",
            **self.stats.describe(),
            "load": asdict(self.load) if self.load else None,
            "load_age_s": None if age is None else round(age, 3),
            "load_stale": age is None or age > max_age_s,
        }

    async def close(self) -> None:
        """Close the channel."""
        await self.channel.close()
