"""Dynamic batching in the worker: the tiny model on CPU, and a synthetic GPU-like worker (a + b*n).

(a) tiny model, CPU: throughput and latency at fixed batch sizes 1/2/4/8/16 (fixed mode with a long delay
    and exactly B clients, so every batch holds B requests).
(b) synthetic worker, service time 20 ms + 2 ms per item, max batch 16: throughput at saturation against
    the ideal 16 / 52 ms, and latency at low load (one client at a time) against a max-batch-1 worker,
    the workers measured in turns in the same run; plus one moderate open-loop load.

    python bench/batching.py [--seconds 6] [--out tables.md]   (its tables are copied into BENCHMARKS.md)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.protocol.load_report import from_metadata
from depthserve.testing.processes import Proc, start_worker
from depthserve.testing.samples import png_bytes, seeded_image

BASE_MS, PER_ITEM_MS, MAX_BATCH = 20.0, 2.0, 16
SYNTHETIC = ["--model", "synthetic", "--synthetic-ms", str(BASE_MS), "--synthetic-per-item-ms", str(PER_ITEM_MS)]


@dataclass
class Run:
    """Latencies of the requests that completed in the measured window, and the batch sizes reported."""

    seconds: float
    latencies: list[float] = field(default_factory=list)
    batches: list[int] = field(default_factory=list)
    errors: int = 0

    def add(self, result: tuple[float, int] | None) -> None:
        """Record one reply (latency, reported batch size), or a failure."""
        if result is None:
            self.errors += 1
            return
        self.latencies.append(result[0])
        self.batches.append(result[1])

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.seconds

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    @property
    def mean_ms(self) -> float:
        return 1000 * statistics.fmean(self.latencies) if self.latencies else float("nan")

    @property
    def batch(self) -> float:
        return statistics.fmean(self.batches) if self.batches else float("nan")


async def call(stub: pb_grpc.GRPCInferenceServiceStub, request: pb.ModelInferRequest) -> tuple[float, int] | None:
    """Send one request; give its latency and the batch size in its load report, or None on an error."""
    started = time.perf_counter()
    try:
        reply = stub.ModelInfer(request, timeout=60)
        await reply
        report = from_metadata(await reply.trailing_metadata())
    except grpc.aio.AioRpcError:
        return None
    return time.perf_counter() - started, report.batch_size if report else 0


def channel(address: str) -> grpc.aio.Channel:
    limit = 64 * 1024 * 1024
    return grpc.aio.insecure_channel(
        address, options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
    )


async def closed_loop(address: str, request: pb.ModelInferRequest, clients: int, seconds: float) -> Run:
    """Keep `clients` requests in flight; count what completes in `seconds` after a one-second ramp."""
    async with channel(address) as chan:
        stub = pb_grpc.GRPCInferenceServiceStub(chan)
        start = time.perf_counter()
        measure_from, end = start + 1.0, start + 1.0 + seconds
        run = Run(seconds)

        async def client() -> None:
            while time.perf_counter() < end:
                result = await call(stub, request)
                if measure_from <= time.perf_counter() <= end:  # completed in the window, whenever sent
                    run.add(result)

        await asyncio.gather(*(client() for _ in range(clients)))
        return run


async def fixed_batches(address: str, request: pb.ModelInferRequest, batch: int, seconds: float) -> Run:
    """Exactly `batch` clients against a worker that closes a batch only when full: every batch is `batch`."""
    async with channel(address) as chan:
        stub = pb_grpc.GRPCInferenceServiceStub(chan)
        await asyncio.gather(*(call(stub, request) for _ in range(batch)))  # one warm batch
        run = Run(seconds)
        start = time.perf_counter()
        rounds = 0
        while time.perf_counter() - start < seconds or rounds < 3:
            for result in await asyncio.gather(*(call(stub, request) for _ in range(batch))):
                run.add(result)
            rounds += 1
        run.seconds = time.perf_counter() - start
        return run


async def turns(addresses: list[str], request: pb.ModelInferRequest, count: int) -> list[Run]:
    """One request at a time, to each worker in turn (so drift hits all alike): the low-load latency."""
    async with contextlib.AsyncExitStack() as stack:
        chans = [await stack.enter_async_context(channel(a)) for a in addresses]
        stubs = [pb_grpc.GRPCInferenceServiceStub(c) for c in chans]
        runs = [Run(1.0) for _ in stubs]
        for index in range(count + 20):  # the first 20 rounds warm up
            for stub, run in zip(stubs, runs, strict=True):
                result = await call(stub, request)
                if index >= 20:
                    run.add(result)
        return runs


async def open_loop(address: str, request: pb.ModelInferRequest, offsets: list[float], size: int = 1) -> Run:
    """Send `size` requests at once at each offset (seconds from the start), whatever comes back."""
    async with channel(address) as chan:
        stub = pb_grpc.GRPCInferenceServiceStub(chan)
        run = Run(offsets[-1])
        tasks = []
        start = time.perf_counter()
        for offset in offsets:
            await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
            tasks += [asyncio.ensure_future(call(stub, request)) for _ in range(size)]
        for result in await asyncio.gather(*tasks):
            run.add(result)
        return run


def poisson(rate: float, seconds: float, seed: int = 1) -> list[float]:
    """Arrival offsets of a Poisson process."""
    rng, offsets = random.Random(seed), [0.0]
    while offsets[-1] < seconds:
        offsets.append(offsets[-1] + rng.expovariate(rate))
    return offsets


def part_a(logs: Path, seconds: float) -> list[str]:
    image = seeded_image(224, 224)
    depth = np.linspace(0.5, 4.0, 224 * 224, dtype=np.float32).reshape(224, 224)
    depth[:, :60] = 0.0  # a band of holes
    request = build_request("lingbot-depth", DepthInputs(image=image, depth=depth))
    lines = [
        "One worker process per row: `--model tiny --threads 2 --max-batch-size B --batching fixed"
        " --max-queue-delay-ms 60000`, and exactly B clients over gRPC, so every batch holds B requests. Each"
        " request is a 224x224 RGB image plus a depth map with a band of holes, as raw tensors, level 9"
        f" (16x16 grid); one warm batch, then at least {seconds:.0f} s and 3 batches per row.",
        "",
        "| batch | req/s | batches/s | p50 ms | p90 ms | ms per image | speed-up vs batch 1 |",
        "|---|---|---|---|---|---|---|",
    ]
    base = 0.0
    for batch in (1, 2, 4, 8, 16):
        flags = ["--model", "tiny", "--threads", "2", "--warmup-levels", "9", "--max-batch-size", str(batch)]
        flags += ["--batching", "fixed", "--max-queue-delay-ms", "60000"]
        worker, address = start_worker(logs, *flags)
        try:
            run = asyncio.run(fixed_batches(address, request, batch, seconds))
        finally:
            worker.stop()
        base = base or run.rps
        lines.append(
            f"| {batch} | {run.rps:.1f} | {run.rps / batch:.2f} | {run.pct(0.5):.0f} | {run.pct(0.9):.0f} | "
            f"{1000 / run.rps:.1f} | {run.rps / base:.2f}x |"
        )
        print(lines[-1], flush=True)
    return lines


WORKERS = [  # name, max batch, flags
    ("max batch 1", 1, ["--max-batch-size", "1"]),
    ("adaptive, max 16", MAX_BATCH, ["--max-batch-size", str(MAX_BATCH), "--batching", "adaptive"]),
    ("fixed 0 ms, max 16", MAX_BATCH, ["--max-batch-size", str(MAX_BATCH), "--batching", "fixed"]),
    (
        "fixed 2 ms, max 16",
        MAX_BATCH,
        ["--max-batch-size", str(MAX_BATCH), "--batching", "fixed", "--max-queue-delay-ms", "2"],
    ),
]


def part_b(logs: Path, seconds: float) -> list[str]:
    request = build_request("lingbot-depth", DepthInputs(image=png_bytes(seeded_image(48, 64))))
    procs: list[Proc] = []
    addresses: list[str] = []
    try:
        for _, _, flags in WORKERS:
            proc, address = start_worker(logs, *SYNTHETIC, *flags, "--queue-limit", "256")
            procs.append(proc)
            addresses.append(address)
        low = asyncio.run(turns(addresses, request, 200))
        saturated = [asyncio.run(closed_loop(a, request, 4 * MAX_BATCH, seconds)) for a in addresses]
        steady = [asyncio.run(open_loop(a, request, poisson(150.0, seconds))) for a in addresses[1:]]
        bursty = [
            asyncio.run(open_loop(a, request, [i * 0.25 for i in range(int(seconds * 4))], 8)) for a in addresses[1:]
        ]
    finally:
        for proc in procs:
            proc.stop()
    lines = [
        f"Saturation: {4 * MAX_BATCH} requests in flight, {seconds:.0f} s measured after a 1 s ramp. The ideal "
        f"throughput at batch n is n / ({BASE_MS:.0f} + {PER_ITEM_MS:.0f} n) ms: "
        f"{1000 / (BASE_MS + PER_ITEM_MS):.1f} req/s at n = 1, "
        f"{MAX_BATCH * 1000 / (BASE_MS + PER_ITEM_MS * MAX_BATCH):.1f} req/s at n = {MAX_BATCH}.",
        "",
        "| worker | req/s | ideal req/s | achieved / ideal | p50 ms | p99 ms | reported batch (mean) | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (name, most, _), run in zip(WORKERS, saturated, strict=True):
        top = most * 1000 / (BASE_MS + PER_ITEM_MS * most)
        lines.append(
            f"| {name} | {run.rps:.1f} | {top:.1f} | {run.rps / top:.1%} | {run.pct(0.5):.1f} | {run.pct(0.99):.1f} "
            f"| {run.batch:.1f} | {run.errors} |"
        )
    lines += [
        "",
        f"Low load: one request at a time, {len(low[0].latencies)} per worker, the workers in turns (so each sees"
        " a request about every 100 ms).",
        "",
        "| worker | mean ms | p50 ms | p90 ms | mean vs max batch 1 | p50 vs max batch 1 |",
        "|---|---|---|---|---|---|",
    ]
    for (name, _, _), run in zip(WORKERS, low, strict=True):
        lines.append(
            f"| {name} | {run.mean_ms:.2f} | {run.pct(0.5):.2f} | {run.pct(0.9):.2f} | "
            f"{run.mean_ms - low[0].mean_ms:+.2f} ms | {run.pct(0.5) - low[0].pct(0.5):+.2f} ms |"
        )
    lines += [
        "",
        f"Between: Poisson arrivals at 150 req/s (3.3x what max batch 1 sustains), and bursts of 8 requests at"
        f" once every 250 ms (32 req/s), {seconds:.0f} s each.",
        "",
        "| worker | load | mean ms | p50 ms | p99 ms | reported batch (mean) | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, runs in (("Poisson 150/s", steady), ("bursts of 8", bursty)):
        for (name, _, _), run in zip(WORKERS[1:], runs, strict=True):
            lines.append(
                f"| {name} | {label} | {run.mean_ms:.1f} | {run.pct(0.5):.1f} | {run.pct(0.99):.1f} | "
                f"{run.batch:.1f} | {run.errors} |"
            )
    saturation = saturated[1].rps / (MAX_BATCH * 1000 / (BASE_MS + PER_ITEM_MS * MAX_BATCH))
    added = (low[1].mean_ms - low[0].mean_ms, low[1].pct(0.5) - low[0].pct(0.5))
    lines += [
        "",
        "Reported batch: the mean, over replies, of `batch_size` in the reply's load report, which is the most"
        " recent batch started when the reply was written (often already the next one), so it only hints at"
        " the batch sizes.",
        "",
        f"Goals (adaptive worker): at saturation {saturation:.1%} of the ideal throughput (goal at least 90%:"
        f" {'met' if saturation >= 0.9 else 'NOT met'}); at low load {added[0]:+.2f} ms mean and {added[1]:+.2f} ms"
        f" p50 over max batch 1 (goal at most 1 ms: {'met' if max(added) <= 1.0 else 'NOT met'}).",
    ]
    for line in lines:
        print(line, flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=6.0, help="measured seconds per load level")
    parser.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    parser.add_argument("--skip-tiny", action="store_true", help="only part (b)")
    args = parser.parse_args()
    import torch

    began = time.perf_counter()
    header = (
        f"{datetime.date.today().isoformat()}, {os.cpu_count()} vCPU, no GPU, torch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )
    print(header, flush=True)
    with tempfile.TemporaryDirectory() as logs:
        a = [] if args.skip_tiny else part_a(Path(logs), args.seconds / 2)
        b = part_b(Path(logs), args.seconds)
    took = time.perf_counter() - began
    text = ["# Dynamic batching (`bench/batching.py`)", "", f"Measured {header}; the bench took {took:.0f} s.", ""]
    if a:
        text += ["## (a) tiny model on CPU, fixed batch sizes", "", *a, ""]
    text += ["## (b) synthetic GPU-like worker: 20 ms + 2 ms per item, max batch 16", "", *b, ""]
    if args.out is None:
        print("\n".join(text))
    else:
        args.out.write_text("\n".join(text))
        print(f"wrote {args.out} ({took:.0f} s)")


if __name__ == "__main__":
    main()
