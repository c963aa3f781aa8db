"""The simulated fleet: its workers by address, their transports, and the scenario's events applied to them."""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Callable

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.gateway.upstream.transport import Fault, TransportError
from depthserve.sim.scenario import Event, FleetEntry, Scenario
from depthserve.sim.sim_transport import SimTransport
from depthserve.sim.worker_model import GpuKind, ServiceModel, SimWorker

log = logging.getLogger("depthserve.sim")


class World:
    """Every worker of a run, created from the scenario, and the events that change them."""

    def __init__(self, scenario: Scenario, auto_weights: bool = False, static_weights: bool = True) -> None:
        self.scenario = scenario
        self.auto_weights = auto_weights
        self.static_weights = static_weights  # False: every worker at weight 1, as a plain --backends list
        model = scenario.worker
        self.service = ServiceModel(
            model.fixed_ms / 1000.0,
            model.per_cost_ms / 1000.0,
            model.sigma,
            model.network_ms / 1000.0,
            model.overhead_ms / 1000.0,
        )
        self.workers: dict[str, SimWorker] = {}
        self.weights: dict[str, float] = {}
        self._rng = random.Random(f"events:{scenario.seed}")
        self.log: list[str] = []  # what happened when, for the report
        for entry in scenario.fleet:
            self._create(entry, entry.count, ready_at=0.0)

    def join(self, entry: FleetEntry, ready_at: float) -> list[SimWorker]:
        """New workers of an entry (an event or the autoscaler), serving from `ready_at`."""
        return self._create(entry, entry.count, ready_at)

    def _create(self, entry: FleetEntry, count: int, ready_at: float) -> list[SimWorker]:
        kind = GpuKind(entry.kind, entry.resolved_speed(), entry.resolved_memory_gb())
        model = self.scenario.worker
        made = []
        for number in range(count):
            index = len(self.workers)
            name = f"{entry.kind.lower()}-{index:04d}:50051"
            address = name if entry.addresses is None else entry.addresses[number]
            if address in self.workers:
                raise ValueError(f"two workers at {address}: a fleet entry's addresses must be its own")
            worker = SimWorker(
                address,
                kind,
                self.service,
                model.max_batch,
                model.queue_limit,
                self.scenario.seed,
                ready_at=ready_at,
                noise_key=name,  # the same draws whatever address the scenario gives it
            )
            self.workers[address] = worker
            self.weights[address] = entry.weight if entry.weight is not None else kind.speed
            made.append(worker)
        return made

    def spec(self, worker: SimWorker) -> BackendSpec:
        """How discovery would announce the worker: its address, static weight (or auto) and hardware."""
        weight = None if self.auto_weights else self.weights[worker.address] if self.static_weights else 1.0
        return BackendSpec(worker.address, weight=weight, hardware=worker.kind.name, source="sim")

    def transport(self, spec: BackendSpec) -> SimTransport:
        """The transport factory the pool dials a worker with."""
        return SimTransport(self.workers[spec.address])

    def select(self, event: Event) -> list[SimWorker]:
        """The workers an event names: by index, by rack, or the first `count` of a kind (all of it by default)."""
        workers = list(self.workers.values())
        if event.workers:
            return [workers[i] for i in event.workers if i < len(workers)]
        if event.rack is not None:
            size = self.scenario.worker.rack_size
            return workers[event.rack * size : (event.rack + 1) * size]
        chosen = [w for w in workers if event.kind is None or w.kind.name == event.kind]
        return chosen[: event.count] if event.count is not None else chosen

    def schedule(self, loop: asyncio.AbstractEventLoop, join: Callable[[SimWorker], None]) -> None:
        """Put every event on the loop at its time; `join` adds a new worker to the gateway's pool."""
        for event in self.scenario.events:
            loop.call_at(event.at_s, self.apply, event, loop, join)

    def apply(self, event: Event, loop: asyncio.AbstractEventLoop, join: Callable[[SimWorker], None]) -> None:
        """Change the workers as the event says."""
        now = loop.time()
        if event.action == "join":
            entry = FleetEntry.model_validate({"kind": event.kind or "A100", "count": event.count or 1})
            for worker in self._create(entry, entry.count, ready_at=now + event.warmup_s):
                join(worker)
            self.log.append(f"{now:.1f}s join {entry.count} x {entry.kind}")
            return
        if event.action == "drift":
            self._drift(event, loop)
            return
        chosen = self.select(event)
        for worker in chosen:
            if event.action == "slow":
                worker.slowdown = event.factor
            elif event.action == "recover":
                worker.slowdown = 1.0
            elif event.action == "kill":
                worker.dead = True
                _fail_all(worker)
            elif event.action == "revive":
                worker.dead = worker.hung = worker.cut_off = False
                worker.ready_at = now + event.warmup_s
            elif event.action == "hang":
                worker.hung = True
            elif event.action == "partition":
                worker.cut_off = True
            elif event.action == "heal":
                worker.cut_off = worker.hung = False
                worker.resume(loop)
        self.log.append(f"{now:.1f}s {event.action} {len(chosen)} worker(s)")

    def _drift(self, event: Event, loop: asyncio.AbstractEventLoop) -> None:
        """Give a share of the workers a new slowdown (log-uniform in 1..factor), and again every `every_s`."""
        workers = list(self.workers.values())
        picked = self._rng.sample(workers, max(1, round(event.share * len(workers))))
        for worker in picked:
            worker.slowdown = math.exp(self._rng.uniform(0.0, math.log(max(event.factor, 1.0))))
        self.log.append(f"{loop.time():.1f}s drift: {len(picked)} workers re-speeded")
        later = loop.time() + event.every_s
        if later < self.scenario.duration_s:
            loop.call_at(later, self._drift, event, loop)


def _fail_all(worker: SimWorker) -> None:
    """A killed worker's connections reset: every call waiting there fails at once."""
    error = TransportError(Fault.UNAVAILABLE, "connection reset")
    for job in [*worker.queue, *worker.running]:
        if not job.future.done():
            job.future.set_exception(error)
    worker.queue.clear()
