"""The full worker as a process, over gRPC on loopback: latency at low load, throughput at saturation, NVML figures.

Clients send what a camera client sends (the PNG image and the raw depth as an FP32 tensor) and take raw
tensors back; every reply's load report gives the batch it ran in. The NVML check reads the worker's
/metrics and `nvidia-smi` at the same moment and compares each figure.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.probes import free_port, grpc_serving
from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.protocol.load_report import LoadReport, from_metadata
from depthserve.testing.processes import Proc, wait_until
from depthserve.testing.samples import png_bytes

START_TIMEOUT_S = 300.0  # loading 1.3 GB and warming up; a bound, not a speed figure


@dataclass
class Served:
    """Replies of one run: latencies (s), load reports, failures."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    reports: list[LoadReport] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    batches: tuple[float, float] | None = None  # (batches run, items in them) over the window, from /metrics

    def summary(self) -> dict[str, Any]:
        """Images per second, latency percentiles, mean batch and the failures, for the report."""
        ordered = sorted(self.latencies)

        def pct(q: float) -> float:
            return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else math.nan

        batches = [report.batch_size for report in self.reports if report.batch_size]
        if self.batches is not None and self.batches[0] > 0:  # every batch once, not the last one per reply
            mean_batch = self.batches[1] / self.batches[0]
        else:
            mean_batch = statistics.fmean(batches) if batches else math.nan
        return {
            "requests": len(self.latencies),
            "errors": len(self.errors),
            "first_errors": self.errors[:3],
            "images_per_s": len(self.latencies) / self.seconds if self.seconds else 0.0,
            "p50_ms": pct(0.5),
            "p99_ms": pct(0.99),
            "mean_batch": mean_batch,
            "batches": self.batches[0] if self.batches is not None else None,
            "gpu_util_mean": statistics.fmean(r.gpu_util for r in self.reports) if self.reports else math.nan,
            "busy_mean": statistics.fmean(r.busy for r in self.reports) if self.reports else math.nan,
        }


def start_worker(log_dir: Path, model_args: list[str], extra: list[str]) -> tuple[Proc, str, str]:
    """Start `depthserve worker` with /metrics on; give the process, its gRPC address and its metrics URL."""
    port, metrics_port = free_port(), free_port()
    args = ["worker", "--port", str(port), "--metrics-port", str(metrics_port), *model_args, *extra]
    proc = Proc(args, log_dir / "worker.log")
    address = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: grpc_serving(address), proc, timeout=START_TIMEOUT_S)
    except BaseException:
        proc.kill()
        raise
    return proc, address, f"http://127.0.0.1:{metrics_port}/metrics"


def request_for(image: np.ndarray, depth: np.ndarray, level: int) -> pb.ModelInferRequest:
    """The request a camera client sends: PNG image, FP32 depth, raw tensors back."""
    return build_request("lingbot-depth", DepthInputs(image=png_bytes(image), depth=depth, resolution_level=level))


async def _one(stub: pb_grpc.GRPCInferenceServiceStub, request: pb.ModelInferRequest, run: Served) -> None:
    started = time.perf_counter()
    try:
        call = stub.ModelInfer(request, timeout=120)
        await call
        report = from_metadata(await call.trailing_metadata())
    except grpc.aio.AioRpcError as exc:
        run.errors.append(f"{exc.code().name}: {exc.details()}")
        return
    run.latencies.append(time.perf_counter() - started)
    if report is not None:
        run.reports.append(report)


async def low_load(address: str, request: pb.ModelInferRequest, count: int) -> Served:
    """One request at a time, `count` of them after two warm ones."""
    run = Served()
    async with grpc.aio.insecure_channel(address, options=_channel_options()) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for _ in range(2):
            await _one(stub, request, Served())
        started = time.perf_counter()
        for _ in range(count):
            await _one(stub, request, run)
        run.seconds = time.perf_counter() - started
    return run


async def saturate(
    address: str,
    request: pb.ModelInferRequest,
    clients: int,
    seconds: float,
    warm_s: float,
    during: Any = None,
    metrics_url: str | None = None,
) -> tuple[Served, Any]:
    """`clients` closed-loop clients for `warm_s` then `seconds`; `during()` (blocking) runs in a thread mid-run.

    With `metrics_url`, the worker's batch-size histogram is read at both ends of the window: its mean batch.
    """
    run = Served()
    async with grpc.aio.insecure_channel(address, options=_channel_options()) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        loop = asyncio.get_running_loop()
        measuring = False
        stop_at = loop.time() + warm_s + seconds

        async def client() -> None:
            # Each client's measured part holds at least one request: on a loaded machine one started in the
            # warm-up can outlast the window, and a window of none said "0 requests" for a worker that served.
            measured = False
            while loop.time() < stop_at or not measured:
                target = run if measuring else Served()
                await _one(stub, request, target)
                measured = target is run

        tasks = [asyncio.create_task(client()) for _ in range(clients)]
        await asyncio.sleep(warm_s)
        measuring, started = True, time.perf_counter()
        before = await asyncio.to_thread(batch_counts, metrics_url) if metrics_url else None
        await asyncio.sleep(seconds / 2)
        observed = await asyncio.to_thread(during) if during is not None else None
        await asyncio.gather(*tasks)
        run.seconds = time.perf_counter() - started
        if before is not None and metrics_url:
            after = await asyncio.to_thread(batch_counts, metrics_url)
            run.batches = (after[0] - before[0], after[1] - before[1])
    return run, observed


def _channel_options() -> list[tuple[str, int]]:
    return [("grpc.max_receive_message_length", 256 * 2**20), ("grpc.max_send_message_length", 256 * 2**20)]


def scrape(url: str) -> dict[str, float]:
    """The worker's /metrics as {name: value} (unlabelled samples; labelled ones keep their first value)."""
    values: dict[str, float] = {}
    with urllib.request.urlopen(url, timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("#") or not line.strip():
                continue
            name, _, value = line.rpartition(" ")
            values.setdefault(name.split("{")[0], float(value))
    return values


def batch_counts(url: str) -> tuple[float, float]:
    """Batches the worker has run and the requests in them, from its batch-size histogram."""
    metrics = scrape(url)
    return metrics["depthserve_worker_batch_size_count"], metrics["depthserve_worker_batch_size_sum"]


SMI_FIELDS = "utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw,clocks.sm"


def smi(gpu: str) -> dict[str, float]:
    """nvidia-smi's reading of one GPU (index or UUID), in the worker's units."""
    out = subprocess.run(
        ["nvidia-smi", "-i", gpu, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip().split(",")  # fmt: skip
    util, used, total, temp, power, clock = (float(value) for value in out)
    return {"util": util / 100, "mem_used": used * 2**20, "mem_total": total * 2**20, "temp_c": temp,
            "power_w": power, "sm_clock_mhz": clock}  # fmt: skip


def worker_figures(metrics: dict[str, float]) -> dict[str, float]:
    """The same figures as the worker exports them."""
    return {
        "util": metrics["depthserve_worker_gpu_utilization_ratio"],
        "mem_used": metrics["depthserve_worker_gpu_memory_used_bytes"],
        "mem_total": metrics["depthserve_worker_gpu_memory_total_bytes"],
        "temp_c": metrics["depthserve_worker_gpu_temperature_celsius"],
        "power_w": metrics["depthserve_worker_gpu_power_watts"],
        "sm_clock_mhz": metrics["depthserve_worker_gpu_sm_clock_hertz"] / 1e6,
    }


# How far apart two readings a fraction of a second apart may be and still count as the same figure.
TOLERANCE = {"util": 0.15, "mem_used": 512 * 2**20, "mem_total": 2**20, "temp_c": 3.0, "power_w": 0.15,
             "sm_clock_mhz": 0.10}  # fmt: skip
RELATIVE = {"power_w", "sm_clock_mhz"}


def compare_nvml(metrics_url: str, gpu: str, samples: int = 3) -> dict[str, Any]:
    """Read /metrics and nvidia-smi side by side `samples` times; a figure matches when its median gap is in bounds."""
    pairs = []
    for _ in range(samples):
        worker = worker_figures(scrape(metrics_url))
        pairs.append((worker, smi(gpu)))
        time.sleep(0.6)  # past the probe's 0.5 s cache, so each pair is a fresh reading
    result: dict[str, Any] = {"pairs": [{"worker": w, "nvidia_smi": s} for w, s in pairs], "figures": {}}
    for name, bound in TOLERANCE.items():
        gaps = [abs(w[name] - s[name]) for w, s in pairs]
        allowed = bound * statistics.median(s[name] for _, s in pairs) if name in RELATIVE else bound
        gap = statistics.median(gaps)
        result["figures"][name] = {"median_gap": gap, "allowed": allowed, "match": bool(gap <= allowed)}
    result["match"] = all(figure["match"] for figure in result["figures"].values())
    return result
