"""Policies by name, so configuration can select one with a string and unknown names fail clearly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from depthserve.balancer.policies.consistent_hash import ConsistentHash
from depthserve.balancer.policies.ip_hash import IpHash
from depthserve.balancer.policies.learned import Learned
from depthserve.balancer.policies.least_connections import LeastConnections
from depthserve.balancer.policies.least_latency import LeastLatency
from depthserve.balancer.policies.p2c import PowerOfTwoChoices
from depthserve.balancer.policies.round_robin import RoundRobin
from depthserve.balancer.policies.score import Score
from depthserve.balancer.policies.weighted_random import WeightedRandom
from depthserve.balancer.policies.weighted_round_robin import WeightedRoundRobin
from depthserve.balancer.types import Policy, PolicyFactory

_FACTORIES: dict[str, type[PolicyFactory]] = {
    factory.name: factory
    for factory in (
        RoundRobin,
        WeightedRoundRobin,
        WeightedRandom,
        LeastConnections,
        LeastLatency,
        PowerOfTwoChoices,
        Score,
        ConsistentHash,
        IpHash,
        Learned,
    )
}


def policy_names() -> list[str]:
    """List the registered policy names."""
    return sorted(_FACTORIES)


def make_policy(name: str, options: Mapping[str, Any] | None = None, seed: int | None = None) -> Policy:
    """Build a fresh policy by name from its options, or raise ValueError naming the choices."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(policy_names())}")
    return factory.from_config(options or {}, seed)
