"""One worker as the gateway knows it: its transport and the gateway's own view of it."""

from __future__ import annotations

from dataclasses import asdict

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.upstream.backend_health import DRAINING, LEAVING, BackendHealth
from depthserve.gateway.upstream.backend_stats import BackendStats
from depthserve.gateway.upstream.transport import Transport
from depthserve.protocol.load_report import LoadReport


class Backend:
    """A worker address with one transport for its whole life, its health state, stats and last load report.

    It takes new requests only while `accepting`: neither drained by an operator nor removed by discovery.
    """

    def __init__(self, spec: BackendSpec, transport: Transport, stats: BackendStats) -> None:
        self.spec = spec
        self.address = spec.address
        self.transport = transport
        self.health = BackendHealth()
        self.stats = stats
        self.load: LoadReport | None = None
        self.load_at = float("-inf")  # gateway clock (monotonic) when the report arrived
        self.drained = False  # an operator asked the gateway to stop sending here; undrain resumes
        self.leaving = False  # discovery removed it: closed once its in-flight calls are done

    @property
    def accepting(self) -> bool:
        """Whether new requests may be sent here (in-flight ones always finish)."""
        return not (self.drained or self.leaving)

    def state(self, now: float) -> str:
        """Name the state shown to operators: leaving or draining first, else what its health says."""
        return LEAVING if self.leaving else DRAINING if self.drained else self.health.state(now)

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
            "state": self.state(now),
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
        """Close the transport."""
        await self.transport.close()
