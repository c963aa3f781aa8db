"""The gateway's inference core, wired once: pool, policies, dispatcher, edge and forwarder.

The HTTP app and the simulator build the same core from the same settings, so what the simulator
measures is the code that serves: only the clock and the transports differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from depthserve.balancer import make_policy
from depthserve.gateway.config import DispatchConfig, EdgeConfig
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.dispatch.forwarding import Forwarder
from depthserve.gateway.edge.edge import Edge
from depthserve.gateway.processes.share import ProcessShare
from depthserve.gateway.upstream.pool import BackendPool, TransportFactory
from depthserve.settings import GatewaySettings


@dataclass(frozen=True)
class GatewayCore:
    """The parts every inference passes through, from admission to the backend."""

    pool: BackendPool
    dispatcher: Dispatcher
    edge: Edge
    forwarder: Forwarder

    @classmethod
    def build(
        cls,
        settings: GatewaySettings,
        clock: Callable[[], float] = time.monotonic,
        transports: TransportFactory | None = None,
        seed: int | None = None,
        share: ProcessShare | None = None,
    ) -> GatewayCore:
        """Wire the core for `settings` (over gRPC unless `transports` says otherwise); `seed` seeds the policies;
        `share` holds the limits this process shares with the gateway's other processes."""
        seed = settings.policy_seed if seed is None else seed
        pool = BackendPool.from_settings(settings, clock, transports)
        policies = {model: make_policy(p.name, p.options, seed) for model, p in settings.policies.items()}
        default_policy = make_policy(settings.policy, settings.policy_options, seed)
        dispatcher = Dispatcher(pool, DispatchConfig.of(settings), default_policy, policies)
        # Surplus waits fairly: a model's beyond what its workers hold, a bound request's beyond what its backend does.
        capacity, lane_capacity = pool.concurrency, pool.backend_concurrency
        edge = Edge(EdgeConfig.of(settings), clock, capacity=capacity, share=share, lane_capacity=lane_capacity)
        return cls(pool, dispatcher, edge, Forwarder(settings, dispatcher, edge))
