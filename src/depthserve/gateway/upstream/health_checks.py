"""Active health checks: gRPC health on an interval, plus now and then a tiny real inference.

A gRPC health answer only says the process is up; the inference probe proves the model still
answers (a hung device, a wedged queue). Results only flip BackendHealth flags, except that a check
that times out, or one that takes a backend out, is reported (`on_stall`) so requests stuck there
can be sent elsewhere at once instead of waiting for their per-try timeout.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from depthserve.gateway.config import HealthCheckConfig
from depthserve.gateway.upstream.backend import Backend
from depthserve.gateway.upstream.transport import Fault, TransportError
from depthserve.protocol.depth_api import DepthInputs, build_request

log = logging.getLogger("depthserve.gateway")
HEALTH_TIMED_OUT = f"health check: {Fault.TIMEOUT.name}"


def probe_request(model: str) -> pb.ModelInferRequest:
    """A solid grey 28x28 image at the smallest resolution: the cheapest inference that exercises the model."""
    inputs = DepthInputs(image=np.full((28, 28, 3), 128, dtype=np.uint8), resolution_level=0, output_format="npy")
    return build_request(model, inputs, request_id="health-probe")


class HealthChecker:
    """Probes every backend of a pool on an interval with jitter; one task per backend."""

    def __init__(
        self,
        config: HealthCheckConfig,
        clock: Callable[[], float],
        on_stall: Callable[[Backend], None] | None = None,
    ) -> None:
        self._settings = config
        self._clock = clock
        self._on_stall = on_stall or (lambda backend: None)
        self._probes: dict[str, pb.ModelInferRequest] = {}  # per model name, built once
        self._rounds: dict[str, int] = {}

    def _probe_for(self, backend: Backend) -> pb.ModelInferRequest:
        """The probe in the model the backend serves (a backend of another model would answer NOT_FOUND)."""
        model = backend.spec.model or self._settings.model
        if model not in self._probes:
            self._probes[model] = probe_request(model)
        return self._probes[model]

    def forget(self, address: str) -> None:
        """Drop what is kept about a removed backend, so churning membership does not grow memory."""
        self._rounds.pop(address, None)

    def _wants_inference(self, backend: Backend, now: float) -> bool:
        """Every Nth round, and every round while anything is in doubt (a failed check, not ready, ejected)."""
        every = self._settings.probe_inference_every
        if not every:
            return False
        rounds = self._rounds.get(backend.address, 0)
        self._rounds[backend.address] = rounds + 1
        health = backend.health
        return rounds % every == 0 or not health.healthy or health.check_failures > 0 or health.ejected(now)

    def _busy(self, backend: Backend, now: float) -> bool:
        load = backend.fresh_load(now, self._settings.max_report_age_s)
        return load is not None and load.queue + load.running > 0

    async def probe(self, backend: Backend, now: float) -> str:
        """Run one check: 'proven' (health and a real inference passed), 'ok' (health only), 'inconclusive',
        'not_serving', or a failure description."""
        result = await self._health(backend)
        if result != "ok" or not self._wants_inference(backend, now):
            return result
        # A forward may take long (queued behind traffic, a large model); gRPC health is still asked every
        # interval meanwhile, so a worker frozen mid-probe is out in threshold rounds, not at the probe's timeout.
        inference = asyncio.ensure_future(self._infer(backend, now))
        watch = asyncio.ensure_future(self._health_while_inferring(backend))
        try:
            await asyncio.wait({inference, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (inference, watch):
                task.cancel()
            await asyncio.gather(inference, watch, return_exceptions=True)
        return inference.result() if inference.done() and not inference.cancelled() else watch.result()

    async def _health_while_inferring(self, backend: Backend) -> str:
        """Ask gRPC health every interval until an answer is not SERVING; give that answer."""
        while True:
            await asyncio.sleep(self._settings.health_interval_s)
            result = await self._health(backend)
            if result != "ok":
                return result

    async def _infer(self, backend: Backend, now: float) -> str:
        """Run the inference probe: 'proven', 'inconclusive' (busy, or queued behind traffic), or a failure."""
        try:
            reply = await backend.transport.infer(
                self._probe_for(backend), self._settings.probe_timeout_s, "health-probe"
            )
            backend.record_load(reply.load, self._clock())
        except TransportError as error:
            backend.record_load(error.load, self._clock())  # a refusal has one too
            if error.fault in (Fault.BUSY, Fault.NOT_FOUND):
                return "inconclusive"  # busy is not sick; another model's worker cannot run our probe
            if error.fault is Fault.TIMEOUT and self._busy(backend, now):
                return "inconclusive"  # queued behind real traffic; passive detection judges that traffic
            return f"inference probe: {error.fault.name} {error.details}"
        return "proven"

    async def _health(self, backend: Backend) -> str:
        """Ask gRPC health once: 'ok', 'not_serving', or a failure description."""
        timeout = self._settings.health_timeout_s
        try:
            serving = await backend.transport.health(timeout)
        except TransportError as error:
            return f"health check: {error.fault.name}"
        return "ok" if serving else "not_serving"

    async def answers(self, backend: Backend) -> bool:
        """Check gRPC health once, now: True when SERVING, else mark the backend in doubt (stalled on a timeout)."""
        result = await self._health(backend)
        if result != "ok":
            backend.health.doubted_at = self._clock()
        if result == HEALTH_TIMED_OUT:
            self._on_stall(backend)
        return result == "ok"

    def _proven(self, backend: Backend, result: str, now: float) -> bool:
        """Whether a passed check proves the model answers: a real inference did, or real traffic did.

        An ejected backend that served a real request since the failures that ejected it (its failure
        streak is reset) is proven too: under load its probe may only be refused or queued, and
        keeping a working backend out then halves a two-worker pool (Envoy unejects on active checks).
        """
        if result == "proven" or not self._settings.probe_inference_every:  # health is all we ask for
            return True
        health = backend.health
        recovered = backend.stats.consecutive_errors == 0
        return health.healthy and not health.check_failures and health.ejected(now) and recovered

    async def check(self, backend: Backend) -> None:
        """Probe once and flip the backend's health flags by the thresholds."""
        health = backend.health
        result = await self.probe(backend, self._clock())
        now = self._clock()
        if result in ("proven", "ok", "inconclusive"):
            was_ejected = health.ejected(now)
            # Only proof that the model answers ends a passive ejection; a health answer alone does not.
            if health.check_passed(now, self._settings.healthy_threshold, proven=self._proven(backend, result, now)):
                log.info("backend %s is ready", backend.address)
                backend.stats.recovered()
            elif was_ejected and not health.ejected(now):
                log.info("backend %s is back: its ejection ended on a passed check", backend.address)
                backend.stats.recovered()
        elif result == "not_serving":
            if health.not_serving():
                log.info("backend %s says NOT_SERVING (%s)", backend.address, health.state(now))
        else:
            health.doubted_at = now
            went_out = health.check_failed(self._settings.unhealthy_threshold)
            if went_out:
                log.warning("backend %s is unhealthy: %s", backend.address, result)
            if went_out or result == HEALTH_TIMED_OUT:
                self._on_stall(backend)

    async def run(self, backend: Backend) -> None:
        """Check one backend forever, with +-20% jitter so checks do not synchronise."""
        interval = self._settings.health_interval_s
        while True:
            try:
                await self.check(backend)
            except Exception:  # noqa: BLE001 - a checker that dies would freeze this backend's state
                log.exception("health check of %s failed unexpectedly", backend.address)
                backend.health.check_failed(self._settings.unhealthy_threshold)
            await asyncio.sleep(interval * random.uniform(0.8, 1.2))
