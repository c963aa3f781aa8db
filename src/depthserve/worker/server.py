"""Run a worker: start gRPC, load and warm the model, report ready, and drain cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import time

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from tritonclient.grpc import service_pb2 as pb

from depthserve.ports import taken
from depthserve.protocol.depth_api import DepthInputs
from depthserve.protocol.reply_wire import add_inference_service
from depthserve.settings import WorkerSettings
from depthserve.telemetry.accelerator import CachedProbe, read_process
from depthserve.telemetry.http_exporter import MetricsServer
from depthserve.telemetry.logs import configure_logging
from depthserve.telemetry.tracing import configure_tracing
from depthserve.worker.batching.batcher import make_batcher
from depthserve.worker.device_queue import DeviceQueue
from depthserve.worker.jobs import WorkerJobs
from depthserve.worker.load import LoadReporter
from depthserve.worker.memory_guard import MemoryGuard
from depthserve.worker.metrics import worker_registry
from depthserve.worker.registration import Registration, hardware_summary, registration_for
from depthserve.worker.runners import Runner, make_runner
from depthserve.worker.servicer import InferenceServicer, WorkerState

log = logging.getLogger("depthserve.worker")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# The OIP service's full name: health checkers (Kubernetes gRPC probes, grpc-health-probe) ask for it by name.
OIP_SERVICE = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name


def grpc_options(max_message_mb: int) -> list[tuple[str, int]]:
    """Raise gRPC's 4 MiB message limit so full-resolution images and depth maps fit; never share the port."""
    limit = max_message_mb * 1024 * 1024
    return [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 0),  # gRPC's default lets a second worker on this port take half its traffic
    ]


def server_credentials(settings: WorkerSettings) -> grpc.ServerCredentials | None:
    """TLS when a certificate is given; with a CA too, clients must present a certificate it signed (mTLS)."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    ca = settings.tls_ca.read_bytes() if settings.tls_ca else None
    pair = (settings.tls_key.read_bytes(), settings.tls_cert.read_bytes())
    return grpc.ssl_server_credentials([pair], root_certificates=ca, require_client_auth=ca is not None)


async def warm_up(runner: Runner, count: int, levels: list[int]) -> None:
    """Run inferences (single and, with batching, a full batch) at each level so no client pays for lazy set-up."""
    for level in levels:
        inputs = DepthInputs(image=np.full((64, 64, 3), 127, dtype=np.uint8), resolution_level=level)
        for _ in range(count):
            prepared = await asyncio.to_thread(runner.prepare, inputs)
            sizes = (1, runner.max_batch) if runner.max_batch > 1 else (1,)
            for size in sizes:
                for result in await runner.compute_batch([prepared] * size):
                    if isinstance(result, Exception):
                        raise result


class Worker:
    """Owns a worker's server, runner and lifecycle."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.runner = make_runner(settings)
        self.device = DeviceQueue(settings.queue_limit, slots=settings.max_concurrent_batches)
        self.state = WorkerState()
        self.batcher = make_batcher(settings, self.runner, self.device, self.state.count_computed)
        self.reporter = LoadReporter(self.batcher, self.device, CachedProbe(read_process))
        self.health = health_aio.HealthServicer()
        self.server = grpc.aio.server(options=grpc_options(settings.max_message_mb))
        self.memory = MemoryGuard(self.reporter.probe, settings.memory_budget_fraction)
        servicer = InferenceServicer(
            settings.name,
            self.runner,
            self.batcher,
            self.state,
            self.reporter,
            self.memory,
            version=settings.version,
            max_reply_bytes=settings.max_message_mb * 1024 * 1024,
        )
        add_inference_service(servicer, self.server)  # ModelInfer answers replies serialized as they were encoded
        self.jobs = WorkerJobs(settings, servicer, self.batcher) if settings.broker else None
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.port = 0
        self.registration: Registration | None = None
        registry = worker_registry(settings, self.state, self.batcher, self.device, self.reporter, self._precision)
        port = settings.metrics_port
        self.metrics = None if port is None else MetricsServer(registry, settings.host, port)

    def _precision(self) -> str:
        """The runner's compute precision once it is loaded and warm, for /metrics ("" before)."""
        return self.runner.precision if self.state.ready else ""

    async def start(self) -> None:
        """Bind and start serving (not ready yet), then load and warm the model."""
        address = f"{self.settings.host}:{self.settings.port}"
        credentials = server_credentials(self.settings)
        try:
            if credentials is None:
                self.port = self.server.add_insecure_port(address)
            else:
                self.port = self.server.add_secure_port(address, credentials)
        except RuntimeError:  # grpc's "Failed to bind": the port was free at start-up, another process took it since
            raise taken(self.settings.host, self.settings.port) from None
        for service in ("", OIP_SERVICE, self.settings.name):
            await self.health.set(service, NOT_SERVING)
        await self.server.start()
        if self.metrics is not None:  # before loading, so a scrape shows the worker warming up
            log.info("metrics on http://%s:%d/metrics", self.settings.host, await self.metrics.start())
        started = time.monotonic()
        log.info("loading model %s", self.settings.model)
        await asyncio.to_thread(self.runner.load)
        loaded = time.monotonic()
        # A pipelined runner keeps a batch staged while one computes: the batcher may start one more.
        self.device.slots = max(self.device.slots, self.runner.pipeline_depth)
        self.reporter.probe = self.memory.probe = self.runner.probe(self.device)
        await warm_up(self.runner, self.settings.warmup_requests, self.settings.warmup_levels)
        self.state.warmup_s = time.monotonic() - loaded
        gc.freeze()  # the model and what warm-up built stay for good: keep them out of every full collection
        self.state.ready = True
        for service in ("", OIP_SERVICE, self.settings.name):
            await self.health.set(service, SERVING)
        if self.jobs is not None:
            await self.jobs.start()  # pull jobs only once warm
        hardware = hardware_summary(self.settings, self.reporter.probe.sample().mem_total)
        self.registration = registration_for(self.settings, self.port, hardware)
        if self.registration is not None:
            await self.registration.start()  # join the registry only once warm
        log.info(
            "depthserve worker ready on %s:%d (model %s, max batch %d %s, %.1fs of which warm-up %.1fs)",
            self.settings.host,
            self.port,
            self.settings.model,
            self.settings.max_batch_size,
            self.settings.batching,
            time.monotonic() - started,
            self.state.warmup_s,
        )

    async def stop(self) -> None:
        """Drain: report NOT_SERVING, serve until gateways stop sending, let in-flight work finish, close."""
        self.state.draining = True
        if self.registration is not None:
            await self.registration.stop()  # leave the registry first, so gateways stop sending here
        if self.jobs is not None:
            await self.jobs.stop(self.settings.drain_seconds)  # unfinished jobs go back to the broker
        await self.health.enter_graceful_shutdown()
        if self.state.ready:
            await self._drain_notice()
        await self.server.stop(self.settings.drain_seconds)
        self.batcher.close()
        if self.metrics is not None:
            await self.metrics.close()
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

    configure_logging("worker", settings.log_format, settings.log_level)
    configure_tracing("depthserve-worker")
    try:
        uvloop.run(run_worker(settings))
    except Exception as exc:  # noqa: BLE001 - a start-up failure ends the process with one clear line
        log.error("worker failed: %s", exc)
        raise SystemExit(1) from None
