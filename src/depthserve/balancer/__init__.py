"""Load-balancing policies: pure, synchronous `pick(snapshot, request)` over immutable backend views."""

from depthserve.balancer.registry import make_policy, policy_names
from depthserve.balancer.types import BackendView, Policy, RequestInfo, Snapshot

__all__ = ["BackendView", "Policy", "RequestInfo", "Snapshot", "make_policy", "policy_names"]
