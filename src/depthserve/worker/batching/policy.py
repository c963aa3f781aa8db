"""When a group of waiting requests runs and how many go in: fixed thresholds (Triton-like) or adaptive.

A policy is pure: the batcher hands it the time and a view of each group, and it answers with a plan.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

from depthserve.worker.batching.stats import Curve


@dataclass(frozen=True)
class GroupView:
    """The waiting requests of one batch key, as a policy sees them."""

    key: Hashable
    size: int  # requests waiting
    limit: int  # most items one batch of this key may hold (max_batch_size and the pixel budget)
    oldest_at: float  # arrival time of the oldest
    deadline: float | None  # earliest deadline among them, None when none has one
    curve: Curve | None  # measured service time, None before any batch ran
    rate: float  # arrivals of this key per second, 0.0 when unknown
    rank: float | None = None  # best rank of its requests (arrival, later for low priority; queue.py), else oldest_at

    @property
    def order(self) -> float:
        """Among ready groups the one lowest in this order runs first."""
        return self.oldest_at if self.rank is None else self.rank


@dataclass(frozen=True)
class Plan:
    """Run `count` requests of group `key` now, or (key None) look again at `wake_at` (None: on the next event)."""

    key: Hashable | None = None
    count: int = 0
    wake_at: float | None = None


class BatchPolicy(Protocol):
    """Chooses, from the waiting groups, the batch to run now or when to look again."""

    name: str

    def plan(self, now: float, groups: Sequence[GroupView]) -> Plan:
        """Decide without side effects; called whenever a request arrives, a batch ends or a timer fires."""
        ...


def group_limit(max_batch: int, max_batch_pixels: int, item_pixels: int) -> int:
    """Give how many items of this size fit one batch: the count cap and the pixel budget, at least one."""
    return max(1, min(max_batch, max_batch_pixels // max(item_pixels, 1)))


def plan_groups(now: float, groups: Sequence[GroupView], hold_s: dict[Hashable, float]) -> Plan:
    """Run the ready group ranked first (oldest, low priority later); a group is ready when full or held long enough.

    A group is held for `hold_s[key]` after its oldest arrival, but never so long that a deadline inside it
    would pass before its batch could finish (by the measured curve).
    """
    chosen: GroupView | None = None
    wake_at: float | None = None
    for group in groups:
        count = min(group.size, group.limit)
        due = group.oldest_at if group.size >= group.limit else group.oldest_at + hold_s[group.key]
        if group.deadline is not None:
            service = group.curve.time(count) if group.curve is not None else 0.0
            due = min(due, group.deadline - service)
        if due <= now:
            if chosen is None or group.order < chosen.order:
                chosen = group
        elif wake_at is None or due < wake_at:
            wake_at = due
    if chosen is not None:
        return Plan(chosen.key, min(chosen.size, chosen.limit))
    return Plan(wake_at=wake_at)


class FixedPolicy:
    """Close a batch when it is full or its oldest request has waited `max_queue_delay_s` (Triton's rule)."""

    name = "fixed"

    def __init__(self, max_queue_delay_s: float) -> None:
        self.max_queue_delay_s = max_queue_delay_s

    def plan(self, now: float, groups: Sequence[GroupView]) -> Plan:
        """Pick the oldest full or expired group."""
        return plan_groups(now, groups, {g.key: self.max_queue_delay_s for g in groups})


class AdaptivePolicy:
    """Hold a partial batch only as long as the measured curve and arrival rate say it pays, within a target.

    With t(n) = a + b*n and arrivals at rate r: holding n requests for d lets the r*d expected meanwhile join
    them instead of waiting for the running batch and paying a batch of their own, but delays the n by d.
    Summed over all of them latency falls by d * (r * (a - b*n - d) - n), most at d* = ((a - b*n) - n/r) / 2.
    At low load (n/r >= a - b*n) d* is not positive and the request runs at once. The hold counts from the
    oldest arrival and is re-planned whenever one arrives (d* shrinks as n grows); it is capped so the oldest
    still finishes, after its batch's predicted service time, within `target_latency_s`. Nothing is held
    before a batch of the key (or any) has been measured and two arrivals seen.
    """

    name = "adaptive"

    def __init__(self, target_latency_s: float) -> None:
        self.target_latency_s = target_latency_s

    def hold_s(self, group: GroupView) -> float:
        """Give how long after its oldest arrival this group should wait for more requests."""
        curve, rate, n = group.curve, group.rate, min(group.size, group.limit)
        if curve is None or rate <= 0 or n >= group.limit:
            return 0.0
        best = ((curve.fixed_s - curve.per_item_s * n) - n / rate) / 2
        if best <= 0:
            return 0.0
        expected = min(group.limit, n + math.ceil(rate * best))
        return max(0.0, min(best, self.target_latency_s - curve.time(expected)))

    def plan(self, now: float, groups: Sequence[GroupView]) -> Plan:
        """Pick the oldest group that is full or has been held as long as it pays."""
        return plan_groups(now, groups, {g.key: self.hold_s(g) for g in groups})


def make_policy(mode: str, max_queue_delay_ms: float, target_latency_ms: float) -> BatchPolicy:
    """Build the policy named by the `batching` setting."""
    if mode == "fixed":
        return FixedPolicy(max_queue_delay_ms / 1000.0)
    if mode == "adaptive":
        return AdaptivePolicy(target_latency_ms / 1000.0)
    raise ValueError(f"unknown batching mode {mode!r}; expected fixed or adaptive")
