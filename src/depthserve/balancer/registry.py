"""Policies by name, so configuration can select one with a string and unknown names fail clearly."""

from __future__ import annotations

from collections.abc import Callable

from depthserve.balancer.policies.round_robin import RoundRobin
from depthserve.balancer.types import Policy

_FACTORIES: dict[str, Callable[[], Policy]] = {
    RoundRobin.name: RoundRobin,
}


def policy_names() -> list[str]:
    """List the registered policy names."""
    return sorted(_FACTORIES)


def make_policy(name: str) -> Policy:
    """Build a fresh policy by name, or raise ValueError naming the choices."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; choose one of {', '.join(policy_names())}")
    return factory()
