"""The open-loop load generator: a warm-up's requests are sent and answered but left out of the stats."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import httpx
import pytest

from depthserve.testing.load import open_loop
from depthserve.testing.processes import start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image


def arrivals_before(seconds: float, rate: float, seed: int) -> int:
    """How many of the Poisson arrivals drawn from `seed` fall before `seconds` (the generator's own draw)."""
    rng, at, count = random.Random(seed), 0.0, 0
    while at < seconds:
        count += 1
        at += rng.expovariate(rate)
    return count


def test_warm_up_requests_are_answered_but_not_counted(tmp_path: Path) -> None:
    worker, address = start_worker(tmp_path, "--synthetic-ms", "2")
    gateway, url = start_gateway(tmp_path, [address])
    try:
        body = png_bytes(seeded_image(32, 32))
        started = time.perf_counter()
        stats = asyncio.run(open_loop(f"{url}/v1/depth", body, rate=40, duration_s=1.0, seed=3, warmup_s=1.0))
        whole = time.perf_counter() - started
        served = httpx.get(f"{url}/v1/cluster").json()["backends"][0]["served"]
    finally:
        gateway.stop()
        worker.stop()
    everything = arrivals_before(2.0, 40, 3)
    warm = arrivals_before(1.0, 40, 3)
    assert stats.sent == everything - warm > 0, "the stats hold only what the measured second sent"
    assert stats.ok == stats.sent and stats.failed == 0 and len(stats.latencies_ms) == stats.sent
    assert served == everything, "every request, the warm-up's included, reached the worker once"
    assert whole - stats.duration_s >= 1.0, "the measured window leaves the warm-up's second out"


def test_a_schedule_replaces_the_drawn_arrivals(tmp_path: Path) -> None:
    # bench/policies.py --same-draws sends the simulator's arrivals: these times, from these clients.
    worker, address = start_worker(tmp_path, "--synthetic-ms", "2")
    gateway, url = start_gateway(tmp_path, [address])
    schedule = [(0.05 * i, i % 3) for i in range(40)]  # 0 .. 1.95 s; the window ends at 1.5 s
    try:
        body = png_bytes(seeded_image(32, 32))
        started = time.perf_counter()
        stats = asyncio.run(
            open_loop(f"{url}/v1/depth", body, rate=1000, duration_s=1.0, warmup_s=0.5, schedule=schedule)
        )
        whole = time.perf_counter() - started
        served = httpx.get(f"{url}/v1/cluster").json()["backends"][0]["served"]
        with pytest.raises(ValueError, match="client 5 of 4"):
            asyncio.run(open_loop(f"{url}/v1/depth", body, rate=1, duration_s=1.0, clients=4, schedule=[(0.0, 5)]))
    finally:
        gateway.stop()
        worker.stop()
    assert served == 30, "the schedule's arrivals before the window's end, none drawn at `rate`"
    assert stats.sent == stats.ok == 20, "those in the measured second, after the warm-up's ten"
    assert whole >= 1.45, "the last arrival left at its scheduled time, not at once"
