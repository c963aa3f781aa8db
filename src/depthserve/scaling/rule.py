"""The scaling rule: workers a pool wants at a target utilisation, from what the gateway sees of it.

Demand is counted in workers kept busy. The busy part comes from measured throughput: a pool that
completes R requests per second, whose workers each complete μ per busy second, keeps R/μ workers
busy (the utilisation law; before any worker has measured μ, in-flight requests over the requests
one worker runs at once stand in). Requests waiting in the gateway for a free worker are work no
worker has started: each `worker_slots` of them would keep one more worker busy. Dividing by the
target utilisation gives the workers wanted, as Kubernetes' HPA does (desired = current x
current/target), with its tolerance, so a pool near its target does not flap. Seed 2's
"more than 100 pending -> scale out" is `pending_threshold`: past it, at least one worker more.

Pure: no I/O and no clock; the caller measures and passes everything in (the gateway, the local
cluster and the simulator call exactly this).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ScalingPolicy:
    """Bounds and thresholds of the rule, one set per model pool."""

    min_workers: int = 1
    max_workers: int = 64
    target_utilization: float = 0.7  # busy share each worker should run at (0-1]
    tolerance: float = 0.1  # demand within this share of the current count changes nothing (HPA's 10%)
    pending_threshold: int | None = None  # more waiting than this: at least one worker more (seed 2: 100)

    def __post_init__(self) -> None:
        if not 0 <= self.min_workers <= self.max_workers:
            raise ValueError(f"need 0 <= min_workers <= max_workers, got {self.min_workers}:{self.max_workers}")
        if not 0 < self.target_utilization <= 1:
            raise ValueError("target_utilization must be in (0, 1]")
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")
        if self.pending_threshold is not None and self.pending_threshold < 0:
            raise ValueError("pending_threshold must not be negative")


@dataclass(frozen=True)
class PoolLoad:
    """What one model pool looks like at one instant, as the gateway (or a simulator) measured it."""

    workers: int  # workers serving now (ready, not draining)
    in_flight: int  # requests admitted and not finished (sent to a worker, or about to be)
    waiting: int  # requests queued in the gateway for a free worker
    completions_per_s: float  # requests the pool completed per second, recently
    worker_rps: float | None = None  # requests one worker completes per busy second; None = not measured yet
    worker_slots: int = 1  # requests one worker runs at once (batch size x concurrent batches)


def demand(load: PoolLoad, target_utilization: float) -> float:
    """Workers the load would keep busy at the target utilisation, unrounded and unbounded.

    Sums over gateways: each gateway sees its share of the traffic, so a cluster's demand is the sum
    of its gateways' (the figure to give an external autoscaler).
    """
    slots = max(1, load.worker_slots)
    if load.worker_rps is not None and load.worker_rps > 0:
        busy = load.completions_per_s / load.worker_rps
    else:
        busy = load.in_flight / slots
    return (busy + load.waiting / slots) / target_utilization


def recommend(load: PoolLoad, policy: ScalingPolicy) -> int:
    """Workers the pool should have now, within the policy's bounds (before stabilisation)."""
    wanted = demand(load, policy.target_utilization)
    if load.workers > 0 and abs(wanted / load.workers - 1.0) <= policy.tolerance:
        count = load.workers  # close enough to the target: a change would only flap
    else:
        count = math.ceil(wanted - 1e-9)  # float dust must not ask for a whole worker more
    if policy.pending_threshold is not None and load.waiting > policy.pending_threshold:
        count = max(count, load.workers + 1)
    return max(policy.min_workers, min(policy.max_workers, count))
