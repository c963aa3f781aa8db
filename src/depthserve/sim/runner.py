"""Run one policy at one load: the real gateway core (admission, pool, policy, dispatcher, health checks,
outlier ejection) on a virtual clock, in front of simulated workers, fed the scenario's arrivals.

Nothing in the gateway knows it is simulated: it is built by `GatewayCore.build` from settings, as the
HTTP app builds it, with the loop's clock and SimTransports in place of gRPC channels.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.dispatch.core import GatewayCore
from depthserve.gateway.edge.upload_budget import UploadLease
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.upstream.transport import InferRequest
from depthserve.settings import GatewaySettings
from depthserve.sim.arrivals import Arrival, arrivals
from depthserve.sim.autoscaler import ScalingLog, SimAutoscaler
from depthserve.sim.scenario import Scenario
from depthserve.sim.sim_transport import COST, GRID
from depthserve.sim.stats import RunStats
from depthserve.sim.world import World
from depthserve.testing import virtual_time

MODEL = "lingbot-depth"


@dataclass
class RunResult:
    """What one policy did at one load."""

    policy: str
    load: float
    offered_rps: float
    stats: RunStats
    measured_s: float  # simulated seconds the statistics cover
    retries: int
    hedges: int
    resent: int
    served_by_kind: Counter[str] = field(default_factory=Counter)
    utilisation: dict[str, float] = field(default_factory=dict)  # per worker, busy share of the run
    kinds: dict[str, str] = field(default_factory=dict)  # worker -> kind
    wall_s: float = 0.0
    events: list[str] = field(default_factory=list)
    requests: int = 0  # every request simulated, the warm-up's too
    scaling: ScalingLog | None = None  # what the autoscaler saw and did, when the scenario has one
    busy_s: float = 0.0  # all workers' busy time together


def policy_settings(scenario: Scenario, policy: str) -> tuple[GatewaySettings, bool]:
    """Gateway settings for a policy name: `name`, `name@auto` (measured weights), `name+queueN` (a cap of N)."""
    overrides: dict[str, Any] = {}
    name = policy
    if "+queue" in name:
        name, cap = name.split("+queue")
        overrides["max_outstanding_per_backend"] = int(cap or scenario.worker.max_batch)
    auto = name.endswith("@auto")
    name = name.removesuffix("@auto")
    slots = scenario.workers * scenario.worker.max_batch
    base: dict[str, Any] = {
        "max_in_flight": max(256, 4 * slots),  # the gateway's default suits a few workers, not a fleet
        "max_queue": max(512, 4 * slots),
        "request_timeout_s": scenario.request_timeout_s,
        "version_seed": scenario.seed,
    }
    if name in scenario.policy_options:
        overrides["policy_options"] = {**scenario.gateway.get("policy_options", {}), **scenario.policy_options[name]}
    settings = GatewaySettings(**{**base, **scenario.gateway, **overrides, "policy": name, "auto_weights": auto})
    return settings, auto


def requests_for(scenario: Scenario) -> list[InferRequest]:
    """One prebuilt request per mix entry: its cost and token grid travel as parameters."""
    built = []
    for entry in scenario.mix:
        request = pb.ModelInferRequest(model_name=MODEL)
        request.parameters[COST].double_param = entry.cost
        request.parameters[GRID].int64_param = entry.level
        built.append(request)
    return built


async def simulate(scenario: Scenario, policy: str, load: float) -> RunResult:
    """Run the scenario for one policy at one load on the running (virtual-time) loop."""
    loop = asyncio.get_running_loop()
    jitter = "" if scenario.jitter_seed is None else f":{scenario.jitter_seed}"
    random.seed(f"gateway:{scenario.seed}{jitter}")  # the health checks' jitter
    settings, auto = policy_settings(scenario, policy)
    weighted = scenario.weighted is None or policy in scenario.weighted
    world = World(scenario, auto_weights=auto, static_weights=weighted)
    core = GatewayCore.build(settings, clock=loop.time, transports=world.transport, seed=scenario.seed)
    pool = core.pool
    for worker in world.workers.values():
        pool.add(world.spec(worker))
    await pool.start()
    autoscaler = SimAutoscaler(scenario.autoscale, world, core, settings) if scenario.autoscale else None
    scaling = None if autoscaler is None else loop.create_task(autoscaler.run(scenario.duration_s))
    gc.freeze()  # the world and the gateway built so far live through the run
    world.schedule(loop, lambda worker: None if pool.add(world.spec(worker)) else None)
    stats = RunStats()
    first = scenario.arrivals.first_client
    clients = [str(first + c) for c in range(scenario.arrivals.clients)]
    sessions = scenario.arrivals.sessions
    headers = [{"x-session-id": f"s{c}"} if sessions else {} for c in range(len(clients))]
    slo_ms, warmup, timeout = scenario.slo_s * 1000.0, scenario.warmup_s, scenario.request_timeout_s
    edge_ms = scenario.edge_ms

    def reading(request: InferRequest) -> Callable[[UploadLease], Awaitable[InferRequest]]:
        async def build(lease: UploadLease) -> InferRequest:
            return request  # the body is in already: the simulator models workers, not uploads

        return build

    builds = [reading(request) for request in requests_for(scenario)]

    source = enumerate(arrivals(scenario, load))
    finished = loop.create_future()  # set when every arrival came and every request ended
    started = [0]
    open_ = [1]  # requests not ended, plus one while arrivals are still to come

    def close_one() -> None:
        open_[0] -= 1
        if not open_[0]:
            finished.set_result(None)

    async def one(arrival: Arrival, number: int) -> None:
        counted = arrival.at >= warmup
        try:
            await core.forwarder.forward(
                MODEL, headers[arrival.client], clients[arrival.client], f"r{number}", timeout, builds[arrival.mix]
            )
        except GatewayError as error:
            stats.refused(arrival.at, f"{error.status} {error.reason}", counted)
        else:
            stats.answered(arrival.at, (loop.time() - arrival.at) * 1000.0 + edge_ms, slo_ms, counted)
        finally:
            close_one()  # counted here rather than by a done callback on each task

    def start(number: int, arrival: Arrival) -> None:
        """Send one request now, and put the next arrival on the clock (one timer per request, no sleeper)."""
        started[0] += 1
        open_[0] += 1
        if arrival.at >= warmup:
            stats.sent += 1
        loop.create_task(one(arrival, number))  # the loop holds it until it ends (its timer or its waker does)
        schedule_next()

    def schedule_next() -> None:
        following = next(source, None)
        if following is None:
            close_one()
        else:
            loop.call_at(following[1].at, start, *following)

    wall = time.perf_counter()
    schedule_next()
    await finished
    if scaling is not None:
        scaling.cancel()
    wall = time.perf_counter() - wall
    result = RunResult(
        policy,
        load,
        scenario.rate_at(load),
        stats,
        max(1e-9, scenario.duration_s - warmup),
        core.dispatcher.budget.retries,
        core.dispatcher.hedges,
        core.dispatcher.stalls.resent,
        wall_s=wall,
        events=world.log,
        requests=started[0],
        scaling=None if autoscaler is None else autoscaler.log,
    )
    end = loop.time()
    for address, worker in world.workers.items():
        result.served_by_kind[worker.kind.name] += worker.served
        result.busy_s += worker.busy_s
        result.utilisation[address] = min(1.0, worker.busy_s / max(end, 1e-9))
        result.kinds[address] = worker.kind.name
    await pool.close()
    return result


GC_THRESHOLD = 100_000  # young-generation allocations between collections while a run goes (default 700)


def run(scenario: Scenario, policy: str, load: float) -> RunResult:
    """Run one policy at one load on a fresh virtual-time loop.

    A run allocates millions of short-lived objects (tasks, futures, handles) beside a large, long-lived
    world (a thousand backends, their tables): with the default thresholds the cyclic collector walked
    that world over and over and took more than half the time. The world is frozen out of its sight and
    young collections made rarer for the run; the settings are restored after.
    """
    thresholds = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *thresholds[1:])
    try:
        return virtual_time.run(simulate(scenario, policy, load))
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        gc.collect()
