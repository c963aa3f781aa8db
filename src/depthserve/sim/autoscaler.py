"""Autoscaling in the simulator: the gateway's own scaling signal decides, simulated workers join and drain.

The signal is the one `/metrics` exports (gateway/upstream/scaling_signal.py: the pure rule of
depthserve.scaling behind its stabiliser), read from the core the run drives. Every `interval_s` the
autoscaler adds workers of `kind` (NOT_SERVING for their warm-up, as real ones) or drains the newest
(the pool stops sending to them; they finish what they hold), and records the timeline: how fast it
reacts to a burst, and what idle GPUs cost.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from depthserve.gateway.dispatch.core import GatewayCore
from depthserve.gateway.upstream.scaling_signal import ScalingSignals
from depthserve.settings import GatewaySettings
from depthserve.sim.scenario import AutoscaleModel, FleetEntry
from depthserve.sim.world import World


@dataclass(frozen=True)
class Step:
    """One look of the autoscaler."""

    at: float
    serving: int  # ready workers the gateway sends to
    warming: int  # started, not yet ready
    desired: int  # what the signal asked for
    demand: float  # workers the load would keep busy at the target (unrounded)


@dataclass
class ScalingLog:
    """What the autoscaler saw and did, and the GPU time it paid for."""

    steps: list[Step] = field(default_factory=list)
    added: int = 0
    drained: int = 0
    worker_seconds: float = 0.0  # workers alive (serving or warming) x time


class SimAutoscaler:
    """Follows the signal by adding and draining simulated workers."""

    def __init__(self, model: AutoscaleModel, world: World, core: GatewayCore, settings: GatewaySettings) -> None:
        self.model = model
        self._world = world
        self._core = core
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.signals = ScalingSignals(settings, core.pool, core.edge.admission.model_waiting, clock=loop.time)
        self.log = ScalingLog()
        self._started: list[str] = []  # addresses the autoscaler added, oldest first
        self._draining: set[str] = set()

    def _warming(self) -> int:
        """Workers added and not yet taking traffic: warming up, or warm and not yet passed their checks."""
        backends = self._core.pool.backends
        return sum(1 for a in self._started if (b := backends.get(a)) is not None and not b.health.healthy)

    async def run(self, until: float) -> None:
        """Look, decide and act every interval until `until` (virtual seconds)."""
        while self._loop.time() < until:
            self.step()
            await asyncio.sleep(self.model.interval_s)

    def step(self) -> None:
        """One look at the signal, and the change it asks for."""
        now = self._loop.time()
        reading = next(r for r in self.signals.evaluate() if r.model == self.signals.default_model)
        serving, warming = reading.load.workers, self._warming()
        self.log.steps.append(Step(now, serving, warming, reading.desired, reading.demand))
        alive = len(self._world.workers) - len(self._draining) - sum(w.dead for w in self._world.workers.values())
        self.log.worker_seconds += alive * self.model.interval_s
        if reading.desired > serving + warming:
            entry = FleetEntry.model_validate({"kind": self.model.kind, "count": reading.desired - serving - warming})
            for worker in self._world.join(entry, now + self.model.warmup_s):
                self._core.pool.add(self._world.spec(worker))
                self._started.append(worker.address)
                self.log.added += 1
        elif reading.desired < serving and not warming:
            for _ in range(serving - reading.desired):
                if not self._started:
                    break
                address = self._started.pop()  # the newest goes first, as a scale-down usually picks
                self._core.pool.remove(address)  # no new requests; it finishes what it holds
                self._draining.add(address)
                self.log.drained += 1
