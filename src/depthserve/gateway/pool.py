"""The backend table: owns every Backend, keeps their health current, and hands out snapshots."""

from __future__ import annotations

import asyncio
import logging
import random
import time

import grpc
from grpc_health.v1 import health_pb2

from depthserve.balancer.types import Snapshot
from depthserve.gateway.backend import READY, UNREADY, Backend
from depthserve.settings import GatewaySettings

log = logging.getLogger("depthserve.gateway")


class BackendPool:
    """All backends of the gateway; the health task is the only writer of their state."""

    def __init__(self, settings: GatewaySettings) -> None:
        self._settings = settings
        self.backends = {
            address: Backend(address, settings.max_message_mb, settings.ewma_alpha) for address in settings.backends
        }
        self._task: asyncio.Task[None] | None = None

    def snapshot(self) -> Snapshot:
        """Give the ready backends as immutable views, for a policy to pick from."""
        views = tuple(b.view() for b in self.backends.values() if b.state == READY)
        return Snapshot(views, time.monotonic())

    def ready_count(self) -> int:
        """Count backends currently ready."""
        return sum(1 for b in self.backends.values() if b.state == READY)

    async def check(self, backend: Backend) -> None:
        """Ask one backend's gRPC health service and set its state from the answer."""
        try:
            reply = await backend.health.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=self._settings.health_timeout_s
            )
            serving = reply.status == health_pb2.HealthCheckResponse.SERVING
        except grpc.aio.AioRpcError:
            serving = False
        state = READY if serving else UNREADY
        if state != backend.state:
            log.info("backend %s is now %s", backend.address, state)
        backend.state = state

    async def _health_loop(self) -> None:
        interval = self._settings.health_interval_s
        while True:
            await asyncio.gather(*(self.check(b) for b in self.backends.values()))
            await asyncio.sleep(interval * random.uniform(0.8, 1.2))

    async def start(self) -> None:
        """Check every backend once, then keep checking in the background."""
        await asyncio.gather(*(self.check(b) for b in self.backends.values()))
        self._task = asyncio.create_task(self._health_loop(), name="health-checks")

    async def close(self) -> None:
        """Stop health checks and close every channel."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*(b.close() for b in self.backends.values()))
