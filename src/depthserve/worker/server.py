"""Run a worker: start gRPC, load and warm the model, report ready, and drain cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.protocol.depth_api import DepthInputs
from depthserve.settings import WorkerSettings
from depthserve.telemetry.accelerator import CachedProbe, read_process
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.load import LoadReporter
from depthserve.worker.runners import Runner, make_runner
from depthserve.worker.servicer import InferenceServicer, WorkerState

log = logging.getLogger("depthserve.worker")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def grpc_options(max_message_mb: int) -> list[tuple[str, int]]:
    """Raise gRPC's 4 MiB message limit so full-resolution images and depth maps fit."""
    limit = max_message_mb * 1024 * 1024
    return [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]


async def warm_up(runner: Runner, count: int, levels: list[int]) -> None:
    """Run inferences at each configured resolution so no client request pays for lazy initialisation."""
    for level in levels:
        inputs = DepthInputs(image=np.full((64, 64, 3), 127, dtype=np.uint8), resolution_level=level)
        for _ in range(count):
            prepared = await asyncio.to_thread(runner.prepare, inputs)
            await runner.compute(prepared)


class Worker:
    """Owns a worker's server, runner and lifecycle."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.runner = make_runner(settings)
        self.queue = DeviceQueue(settings.queue_limit)
        self.state = WorkerState()
        self.reporter = LoadReporter(self.queue, CachedProbe(read_process), self.runner.max_batch)
        self.health = health_aio.HealthServicer()
        self.server = grpc.aio.server(options=grpc_options(settings.max_message_mb))
        servicer = InferenceServicer(settings.name, self.runner, self.queue, self.state, self.reporter)
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, self.server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = 0

    async def start(self) -> None:
        """Bind and start serving (not ready yet), then load and warm the model."""
        self.port = self.server.add_insecure_port(f"{self.settings.host}:{self.settings.port}")
        await self.health.set("", NOT_SERVING)
        await self.server.start()
        started = time.monotonic()
        log.info("loading model %s", self.settings.model)
        await asyncio.to_thread(self.runner.load)
        self.reporter.probe = self.runner.probe(self.queue)
        await warm_up(self.runner, self.settings.warmup_requests, self.settings.warmup_levels)
        self.state.ready = True
        await self.health.set("", SERVING)
        await self.health.set(self.settings.name, SERVING)
        log.info(
            "depthserve worker ready on %s:%d (model %s, %.1fs)",
            self.settings.host,
            self.port,
            self.settings.model,
            time.monotonic() - started,
        )

    async def stop(self) -> None:
        """Drain: report NOT_SERVING, serve until gateways stop sending, let in-flight work finish, close."""
        self.state.draining = True
        await self.health.enter_graceful_shutdown()
        if self.state.ready:
            await self._drain_notice()
        await self.server.stop(self.settings.drain_seconds)
        state = self.state
        log.info(
            "worker on port %d stopped (served %d, failed %d, computed %d, refused before ready %d)",
            self.port,
            state.served,
            state.failed,
            state.computed,
            state.refused_not_ready,
        )

    async def _drain_notice(self) -> None:
        loop = asyncio.get_running_loop()
        settings = self.settings
        ends = loop.time() + settings.drain_notice_s
        while loop.time() < ends:
            if loop.time() - max(self.state.last_request_at, ends - settings.drain_notice_s) >= settings.drain_quiet_s:
                return  # nobody has sent anything for a while: every gateway has noticed
            await asyncio.sleep(0.05)


async def run_worker(settings: WorkerSettings) -> None:
    """Run a worker until SIGTERM or SIGINT."""
    worker = Worker(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    start = asyncio.create_task(worker.start())
    waiter = asyncio.create_task(stop.wait())
    await asyncio.wait({start, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if start.done() and start.exception() is not None:
        waiter.cancel()
        await worker.server.stop(0)
        raise start.exception()  # type: ignore[misc]
    await waiter
    start.cancel()
    await worker.stop()


def main(settings: WorkerSettings) -> None:
    """Entry point of `depthserve worker`: uvloop, logging, run."""
    import uvloop

    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        uvloop.run(run_worker(settings))
    except Exception as exc:  # noqa: BLE001 - a start-up failure ends the process with one clear line
        log.error("worker failed: %s", exc)
        raise SystemExit(1) from None
