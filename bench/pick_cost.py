"""Gateway-side CPU per request for choosing a backend, against the pool's size, for every policy.

In process, with fake backends behind the Transport seam: each request is what the dispatcher does
around the call itself, `pool.snapshot_for` (the pool's table, rebuilt only on change), the policy's
`pick` of `max_attempts` candidates, the dispatcher's check that they are usable, and one call's
checkout and settlement (stats, load report, slot, outcome listeners). Every backend carries a fresh
load report and a latency history, as a busy pool's do. CPU time is the process's own
(`time.process_time`), over interleaved rounds; the table gives the median per request and its ratio
to the cost at the smallest pool.

    python bench/pick_cost.py [--sizes 10,100,1000,5000] [--requests 20000] [--rounds 3] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from depthserve.balancer import RequestInfo, make_policy, policy_names
from depthserve.balancer.types import Policy
from depthserve.gateway.config import DispatchConfig
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.protocol.load_report import LoadReport
from depthserve.settings import GatewaySettings
from depthserve.testing.fake_transport import FakeFleet
from depthserve.testing.fakes import FakeClock

CONFIGS = [(name, {}) for name in policy_names()] + [("score", {"sample_size": 8})]


def label(name: str, options: dict[str, object]) -> str:
    """A policy and its options as a row name."""
    return name + "".join(f" {k}={v}" for k, v in options.items())


def build(size: int, policy: Policy) -> tuple[Dispatcher, FakeClock]:
    """A pool of `size` ready fake backends with reports and latencies, and a dispatcher over it."""
    clock = FakeClock()
    backends = [f"10.0.{i // 250}.{i % 250}:50051" for i in range(size)]
    settings = GatewaySettings(backends=backends, slow_start_s=0, probe_inference_every=0)
    pool = BackendPool.from_settings(settings, clock=clock, transports=FakeFleet())
    for index, backend in enumerate(pool.backends.values()):
        backend.health.check_passed(clock() - 60.0, settings.healthy_threshold)
        backend.record_load(LoadReport(queue=index % 5, queue_limit=64, running=1, max_batch=8, slots=8), clock())
        backend.stats.started()
        backend.stats.finished(True, 20.0 + index % 7, clock())  # a latency history, as a busy pool has
    return Dispatcher(pool, DispatchConfig.of(settings), policy), clock


def per_request_us(dispatcher: Dispatcher, clock: FakeClock, requests: int) -> float:
    """CPU microseconds per request of snapshot + pick + usability check + one call's outcome."""
    pool, attempts = dispatcher.pool, dispatcher.settings.max_attempts
    infos = [RequestInfo(model="lingbot-depth", client=f"10.9.{i % 200}.{i % 97}") for i in range(64)]
    report = LoadReport(queue=1, queue_limit=64, running=1, max_batch=8, slots=8)
    started = time.process_time()
    for i in range(requests):
        info = infos[i % 64]
        snapshot = pool.snapshot_for(info)
        by_id = snapshot.table.by_id
        picked = [
            b
            for b in dispatcher.policy_for(info.model).pick(snapshot, info, attempts)
            if dispatcher._usable(by_id.get(b))
        ]
        call = pool.checkout(picked[0])
        assert call is not None
        clock.advance(0.0001)
        call.ok(report)
    return (time.process_time() - started) / requests * 1e6


async def measure(sizes: list[int], requests: int, rounds: int) -> dict[tuple[str, int], list[float]]:
    """Interleave sizes and policies round by round, so machine noise spreads over every cell alike."""
    results: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for name, options in CONFIGS:
            for size in sizes:
                dispatcher, clock = build(size, make_policy(name, options, seed=1))
                per_request_us(dispatcher, clock, requests // 10)  # warm: tables, caches, rings
                results.setdefault((label(name, options), size), []).append(per_request_us(dispatcher, clock, requests))
                await dispatcher.pool.close()
    return results


def ratio_index(sizes: list[int]) -> int:
    """The size the goal compares with the smallest: 1,000 backends when measured, else the largest."""
    return sizes.index(1000) if 1000 in sizes else len(sizes) - 1


def rows(results: dict[tuple[str, int], list[float]], sizes: list[int]) -> list[tuple[str, list[float], float]]:
    """Per policy: the median µs per size, and the ratio of the compared size to the smallest."""
    out = []
    for name, options in CONFIGS:
        row = label(name, options)
        medians = [statistics.median(results[(row, size)]) for size in sizes]
        out.append((row, medians, medians[ratio_index(sizes)] / medians[0]))
    return out


def render(results: dict[tuple[str, int], list[float]], sizes: list[int], load: float) -> Table:
    """Median µs per request per policy and size, and the ratio to the smallest pool."""
    table = Table(title=f"CPU µs per request (median of rounds), load average {load:.2f}")
    table.add_column("policy")
    for size in sizes:
        table.add_column(f"{size}", justify="right")
    table.add_column(f"{sizes[ratio_index(sizes)]} ÷ {sizes[0]}", justify="right")
    for row, medians, ratio in rows(results, sizes):
        table.add_row(row, *(f"{m:.1f}" for m in medians), f"{ratio:.2f}x")
    return table


def markdown(results: dict[tuple[str, int], list[float]], sizes: list[int], load: float) -> str:
    """The same table in Markdown, for BENCHMARKS.md."""
    head = f"| policy | {' | '.join(f'{s} backends' for s in sizes)} | {sizes[ratio_index(sizes)]} ÷ {sizes[0]} |"
    lines = [head, "|" + "---|" * (len(sizes) + 2)]
    for row, medians, ratio in rows(results, sizes):
        lines.append(f"| {row} | {' | '.join(f'{m:.1f}' for m in medians)} | {ratio:.2f}x |")
    lines.append(f"\nµs of CPU per request, median of rounds; load average {load:.2f}.")
    return "\n".join(lines)


def main() -> None:
    """Parse flags, measure, print (and write) the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,5000")
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = asyncio.run(measure(sizes, args.requests, args.rounds))
    load = os.getloadavg()[0]
    Console().print(render(results, sizes, load))
    if args.markdown:
        args.markdown.write_text(markdown(results, sizes, load) + "\n")


if __name__ == "__main__":
    main()
