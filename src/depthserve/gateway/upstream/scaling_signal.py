"""The autoscaling signal: per model pool, what the gateway sees (workers, in-flight, waiting, throughput)
fed to the shared rule in `depthserve.scaling`, read when `/metrics` or `/v1/cluster` is asked.

Evaluated on read, not on a timer: the stabiliser keeps the time of each reading, so readers a
second apart (`depthserve up --autoscale`) and a scrape every 15 s both get a count that rises at
once and falls only after the quiet window. Inputs are read from what the pool and the admission
controller already keep; nothing here is on the request path.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

from depthserve.gateway.upstream.pool import BackendPool
from depthserve.scaling import PoolLoad, RateMeter, ScalingPolicy, Stabiliser, demand, recommend
from depthserve.settings import GatewaySettings


@dataclass(frozen=True)
class Reading:
    """One model pool's signal at one instant."""

    model: str
    load: PoolLoad
    demand: float  # workers kept busy at the target utilisation, unrounded (sums over gateways)
    recommended: int  # the rule's count now, bounded
    desired: int  # stabilised: what an autoscaler should run

    def describe(self) -> dict[str, object]:
        """The reading for /v1/cluster."""
        return {
            **asdict(self.load),
            "demand": round(self.demand, 3),
            "recommended": self.recommended,
            "desired": self.desired,
        }


class ScalingSignals:
    """Keeps one rate meter and one stabiliser per model pool and evaluates the rule when read."""

    def __init__(
        self,
        settings: GatewaySettings,
        pool: BackendPool,
        admission_waiting: Callable[[str], int],
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.policy = ScalingPolicy(
            min_workers=settings.scale_min_workers,
            max_workers=max(settings.scale_min_workers, settings.scale_max_workers),
            target_utilization=settings.scale_target_utilization,
            tolerance=settings.scale_tolerance,
            pending_threshold=settings.scale_pending_threshold,
        )
        self.down_window_s = settings.scale_down_window_s
        self.rate_window_s = settings.scale_rate_window_s
        self.default_model = settings.model
        self.max_report_age_s = settings.max_report_age_s
        self._pool = pool
        self._admission_waiting = admission_waiting  # requests of a model queued for admission
        self._clock = clock or pool.clock
        self._meters: dict[str, RateMeter] = {}
        self._stabilisers: dict[str, Stabiliser] = {}
        self._served: dict[tuple[str, str], int] = {}  # (model, address) -> served count last seen
        self._completed: dict[str, int] = {}  # model -> completions counted, never falling when backends leave

    def models(self) -> list[str]:
        """The pools to report: the default model and every model a backend is tagged with."""
        tagged = {b.spec.model for b in self._pool.backends.values() if b.spec.model}
        return sorted({self.default_model, *tagged})

    def _completions(self, model: str) -> int:
        """Requests the model's backends completed since start, counting only growth of backends still known."""
        total = self._completed.get(model, 0)
        seen = set()
        for address, backend in self._pool.backends.items():
            if not backend.spec.serves(model):
                continue
            key = (model, address)
            seen.add(key)
            served = backend.stats.served
            total += max(0, served - self._served.get(key, served))
            self._served[key] = served
        for key in [k for k in self._served if k[0] == model and k not in seen]:
            del self._served[key]
        self._completed[model] = total
        return total

    def measure(self, model: str, now: float) -> PoolLoad:
        """The model pool's load as this gateway sees it now."""
        members = [b for b in self._pool.backends.values() if b.spec.serves(model)]
        ready = self._pool.eligible(now, model)
        rates = [
            load.capacity_rps
            for b in ready
            if (load := b.fresh_load(now, self.max_report_age_s)) is not None and load.capacity_rps > 0
        ]
        slots = [max(b.load.max_batch, b.load.slots) for b in members if b.load is not None]
        meter = self._meters.setdefault(model, RateMeter(self.rate_window_s))
        return PoolLoad(
            workers=len(ready),
            in_flight=sum(b.stats.in_flight for b in members),
            waiting=self._admission_waiting(model) + self._pool.slots.waiting_for(model),
            completions_per_s=meter.observe(now, self._completions(model)),
            worker_rps=statistics.median(rates) if rates else None,
            worker_slots=max(1, round(statistics.median(slots))) if slots else 1,
        )

    def evaluate(self) -> list[Reading]:
        """Read every pool and run the rule and its stabiliser once."""
        now = self._clock()
        readings = []
        for model in self.models():
            load = self.measure(model, now)
            recommended = recommend(load, self.policy)
            stabiliser = self._stabilisers.setdefault(model, Stabiliser(self.down_window_s))
            desired = stabiliser.update(recommended, load.workers, now)
            readings.append(Reading(model, load, demand(load, self.policy.target_utilization), recommended, desired))
        return readings

    def describe(self) -> dict[str, object]:
        """The signal for /v1/cluster: the policy, then each pool's reading."""
        return {
            "policy": {**asdict(self.policy), "down_window_s": self.down_window_s},
            "pools": {reading.model: reading.describe() for reading in self.evaluate()},
        }
