"""Calibrate `four_workers` on this machine, now: the workers' own time per request and the time outside the gateway.

`bench/policies.py` and the scenario offer shares of what the four workers complete. At 95% the fast pair runs
97-99% busy, where half a millisecond of a worker's own time per request moves the p50 by up to 2x, and
this two-core machine's reading of that time moved by half a millisecond between two days (live p50 at 95%
then read 0.9x the simulator one day and 1.4x the next, with no change to the code). So a validation measures
the machine in the same sitting as its live runs, and both sides offer the same rates at what it measured:

    python bench/sim_calibrate.py --out today.yaml                         # before the live runs
    python bench/policies.py --same-draws today.yaml --seed 1 --duration 30 --duration-at 0.8=120,0.95=120 \\
        --markdown r1.md                                                   # r2 alike
    python bench/sim_calibrate.py --check today.yaml                       # after them: exit 1 if the machine moved
    python bench/sim_validate.py r1.md r2.md --scenario today.yaml --seeds 1 --jitter-seeds 1-15

Own time: the four workers at a constant 20 ms / speed, kept busy through a least-connections gateway by a
closed loop of 16 requests in flight (every worker always has the next one queued, and the machine carries
the bench's ~120 requests a second); what they complete in a window gives the own time o that solves
sum 1 / (service_i + o) = completed per second. Edge: a 0 ms worker answering at the rate of the 80% cell;
its p50 is network + own + edge, so edge = p50 - network_ms - o.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from depthserve.sim.command import resolve
from depthserve.sim.scenario import Scenario, load_scenario
from depthserve.testing.h2_client import EagerH2Client
from depthserve.testing.load import client_pool, open_loop
from depthserve.testing.processes import Proc, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image

sys.path.insert(0, str(Path(__file__).parent))
from policies import GATEWAY_FLAGS, SPEEDS, is_bench_fleet, served_by  # noqa: E402  (a sibling script, not a package)

IN_FLIGHT = 16
OWN_TOLERANCE_MS = 0.15  # 0.16 ms more a request moved the 95% cells by 0-6% (2026-12-07), 0.55 ms by up to 2x
EDGE_TOLERANCE_MS = 0.5


async def busy_rate(url: str, body: bytes, warmup_s: float, window_s: float) -> float:
    """Requests a second the workers complete while a closed loop keeps IN_FLIGHT requests at the gateway."""
    stop = asyncio.Event()

    async def keep_sending(client: EagerH2Client) -> None:
        while not stop.is_set():
            reply = await client.post("/v1/depth", body, {"content-type": "image/png"})
            if reply.status_code != 200:
                raise SystemExit(f"calibration: the gateway answered {reply.status_code}: {reply.content[:200]!r}")

    senders = [asyncio.create_task(keep_sending(c)) for c in client_pool(url, IN_FLIGHT, 30.0)]
    await asyncio.sleep(warmup_s)
    first, started = sum((await served_by(url)).values()), time.monotonic()
    await asyncio.sleep(window_s)
    last, ended = sum((await served_by(url)).values()), time.monotonic()
    stop.set()
    await asyncio.gather(*senders)
    return (last - first) / (ended - started)


def own_time_ms(rate: float, service_ms: list[float]) -> float:
    """The own time o (ms) a request at which the workers complete `rate` a second: sum 1 / (s_i + o) = rate."""
    low, high = -min(service_ms) + 1e-6, 1000.0
    for _ in range(100):
        middle = (low + high) / 2
        if sum(1000.0 / (s + middle) for s in service_ms) > rate:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def measure_own(logs: Path, service_ms: float, rounds: int, window_s: float) -> list[float]:
    """The workers' own time per request (ms), once per round, on a fresh gateway each round."""
    body = png_bytes(seeded_image(64, 64))
    workers: list[Proc] = []
    try:
        addresses = []
        for index, speed in enumerate(SPEEDS):
            proc, address = start_worker(
                logs,
                *("--synthetic-ms", str(service_ms), "--speed", str(speed), "--warmup-requests", "0"),
                *("--queue-limit", "256"),
                name=f"calibration-worker{index}",
            )
            workers.append(proc)
            addresses.append(address)
        readings = []
        for _ in range(rounds):
            gateway, url = start_gateway(
                logs, addresses, "--policy", "least_connections", "--slow-start-s", "0", *GATEWAY_FLAGS
            )
            try:
                rate = asyncio.run(busy_rate(url, body, 2.0, window_s))
            finally:
                gateway.stop()
            readings.append(own_time_ms(rate, [service_ms / speed for speed in SPEEDS]))
        return readings
    finally:
        for proc in workers:
            proc.stop()


def measure_edge(logs: Path, rate: float, rounds: int, window_s: float) -> list[float]:
    """A 0 ms worker's p50 through the gateway (ms) at `rate` requests a second, once per round."""
    body = png_bytes(seeded_image(64, 64))
    worker, address = start_worker(logs, "--warmup-requests", "0", name="calibration-zero")
    try:
        readings = []
        for index in range(rounds):
            gateway, url = start_gateway(logs, [address], "--slow-start-s", "0", *GATEWAY_FLAGS)
            try:
                stats = asyncio.run(open_loop(f"{url}/v1/depth", body, rate, window_s, seed=index, warmup_s=1.0))
            finally:
                gateway.stop()
            if stats.failed:
                raise SystemExit(f"calibration: {stats.failed} of {stats.sent} requests to a 0 ms worker failed")
            readings.append(stats.percentile(50))
        return readings
    finally:
        worker.stop()


def calibrated(base_text: str, own_ms: float, edge_ms: float, note: str) -> str:
    """The scenario's YAML with this sitting's own time and edge in place of its own, saying where they came from."""
    text, own_count = re.subn(r"overhead_ms: [0-9.]+", f"overhead_ms: {own_ms:.3f}", base_text)
    text, edge_count = re.subn(r"(?m)^edge_ms: [0-9.]+", f"edge_ms: {edge_ms:.3f}", text)
    if own_count != 1 or edge_count != 1:
        raise SystemExit("calibration: the base scenario must give overhead_ms (in worker:) and edge_ms once each")
    return f"# {note}\n{text}"


def drifted(calibration: Scenario, own_ms: float, edge_ms: float) -> bool:
    """Whether the machine now reads a calibrated scenario's own time or edge beyond what keeps its 95% cells."""
    return (
        abs(own_ms - calibration.worker.overhead_ms) > OWN_TOLERANCE_MS
        or abs(edge_ms - calibration.edge_ms) > EDGE_TOLERANCE_MS
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--out", type=Path, help="write the calibrated scenario here")
    action.add_argument("--check", type=Path, help="measure again; exit 1 if this calibrated scenario no longer holds")
    parser.add_argument("--base", default="four_workers", help="the scenario to calibrate (a shipped name or a file)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=8.0, help="measured seconds per round")
    args = parser.parse_args()
    base_path = resolve(args.base) if args.out else args.check
    base: Scenario = load_scenario(base_path)
    model = base.worker
    if not is_bench_fleet(base, model.fixed_ms) or model.per_cost_ms:
        raise SystemExit(f"{base_path}: not bench/policies.py's fleet ({SPEEDS}, one request at a time)")
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory() as tmp:
        own = measure_own(Path(tmp), model.fixed_ms, args.rounds, args.window)
        own_ms = statistics.median(own)
        rate = 0.8 * base.model_copy(update={"worker": model.model_copy(update={"overhead_ms": own_ms})}).capacity_rps()
        p50 = measure_edge(Path(tmp), rate, args.rounds, args.window)
    edge_ms = max(0.0, statistics.median(p50) - model.network_ms - own_ms)
    console.print(
        f"own time {own_ms:.3f} ms a request ({', '.join(f'{x:.3f}' for x in own)}); "
        f"0 ms worker p50 at {rate:.0f} req/s {statistics.median(p50):.2f} ms ({', '.join(f'{x:.2f}' for x in p50)}) "
        f"-> edge {edge_ms:.3f} ms (network {model.network_ms} ms)"
    )
    if args.check is not None:
        moved = drifted(base, own_ms, edge_ms)
        verdict = "moved: the live runs since the calibration are not comparable" if moved else "holds"
        console.print(
            f"{args.check}: own {model.overhead_ms:.3f} -> {own_ms:.3f} ms (within {OWN_TOLERANCE_MS}), "
            f"edge {base.edge_ms:.3f} -> {edge_ms:.3f} ms (within {EDGE_TOLERANCE_MS}): {verdict}"
        )
        raise SystemExit(1 if moved else 0)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    note = (
        f"bench/sim_calibrate.py {stamp}: own {own_ms:.3f} ms ({', '.join(f'{x:.3f}' for x in own)}), "
        f"0 ms worker p50 {statistics.median(p50):.2f} ms at {rate:.0f} req/s"
    )
    args.out.write_text(calibrated(base_path.read_text(), own_ms, edge_ms, note))
    written = load_scenario(args.out)  # what was written must load
    console.print(f"wrote {args.out}: capacity {written.capacity_rps():.1f} req/s")


if __name__ == "__main__":
    main()
