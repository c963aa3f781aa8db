"""Active health checks: gRPC health on an interval, plus now and then a tiny real inference.

A gRPC health answer only says the process is up; the inference probe proves the model still
answers (a hung device, a wedged queue). Results only flip BackendHealth flags.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import grpc
import numpy as np
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.backend import Backend
from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.settings import GatewaySettings

log = logging.getLogger("depthserve.gateway")
SERVING = health_pb2.HealthCheckResponse.SERVING


def probe_request(model: str) -> pb.ModelInferRequest:
    """A solid grey 28x28 image at the smallest resolution: the cheapest inference that exercises the model."""
    inputs = DepthInputs(image=np.full((28, 28, 3), 128, dtype=np.uint8), resolution_level=0, output_format="npy")
    return build_request(model, inputs, request_id="health-probe")


class HealthChecker:
    """Probes every backend of a pool on an interval with jitter; one task per backend."""

    def __init__(self, settings: GatewaySettings, clock: Callable[[], float]) -> None:
        self._settings = settings
        self._clock = clock
        self._probe = probe_request(settings.model)
        self._rounds: dict[str, int] = {}

    async def probe(self, backend: Backend) -> str:
        """Run one check; return 'ok', 'not_serving' or a failure description."""
        timeout = self._settings.health_timeout_s
        try:
            reply = await backend.health_stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        except grpc.aio.AioRpcError as error:
            return f"health check: {error.code().name}"
        if reply.status != SERVING:
            return "not_serving"
        every = self._settings.probe_inference_every
        rounds = self._rounds.get(backend.address, 0)
        self._rounds[backend.address] = rounds + 1
        if every and rounds % every == 0:
            try:
                await backend.stub.ModelInfer(self._probe, timeout=timeout)
            except grpc.aio.AioRpcError as error:
                if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:  # busy is not sick
                    return f"inference probe: {error.code().name} {error.details()}"
        return "ok"

    async def check(self, backend: Backend) -> None:
        """Probe once and flip the backend's health flags by the thresholds."""
        result = await self.probe(backend)
        health = backend.health
        now = self._clock()
        if result == "ok":
            if health.check_passed(now, self._settings.healthy_threshold):
                log.info("backend %s is ready", backend.address)
        elif result == "not_serving":
            if health.not_serving():
                log.info("backend %s says NOT_SERVING (%s)", backend.address, health.state(now))
        elif health.check_failed(self._settings.unhealthy_threshold):
            log.warning("backend %s is unhealthy: %s", backend.address, result)

    async def run(self, backend: Backend) -> None:
        """Check one backend forever, with +-20% jitter so checks do not synchronise."""
        interval = self._settings.health_interval_s
        while True:
            await self.check(backend)
            await asyncio.sleep(interval * random.uniform(0.8, 1.2))
