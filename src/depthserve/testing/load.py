"""Open-loop load against a gateway that accounts for every request: answered, failed by status, mixed up.

Arrivals follow a Poisson process at the offered rate whatever the replies do (an open loop, like
real clients), so an overloaded cluster shows up as latency and refusals, not as a slower sender. Requests
go over HTTP/2 cleartext through testing/h2_client.py, whose replies reach their callers as they arrive
(httpx's HTTP/2 held them for seconds when a dozen requests waited on one connection).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from depthserve.testing.h2_client import EagerH2Client, split_url


@dataclass
class LoadStats:
    """What happened to every request sent: each is in exactly one of ok, by_status, transport_errors."""

    sent: int = 0
    ok: int = 0
    by_status: Counter[int] = field(default_factory=Counter)
    by_reason: Counter[str] = field(default_factory=Counter)  # refusals by "STATUS reason" (JSON error body)
    unclear: int = 0  # refusals without a JSON reason, or 503s without Retry-After: not a clear answer
    transport_errors: int = 0
    mixed_up: int = 0  # replies carrying another request's id: would mean a reply went to the wrong caller
    latencies_ms: list[float] = field(default_factory=list)
    refused_sent_s: list[float] = field(default_factory=list)  # when each non-200 was sent, seconds from the start
    backends: Counter[str] = field(default_factory=Counter)
    duration_s: float = 0.0  # the sending window (replies may arrive after it)

    @property
    def failed(self) -> int:
        """Requests that did not get a 200."""
        return sum(self.by_status.values()) + self.transport_errors

    def percentile(self, q: float) -> float:
        """Latency percentile of successful requests, in milliseconds."""
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms else float("nan")

    @property
    def throughput(self) -> float:
        """Successful requests per second over the run."""
        return self.ok / self.duration_s if self.duration_s else 0.0


def client_pool(url: str, count: int, timeout_s: float, distinct_sources: bool = True) -> list[EagerH2Client]:
    """HTTP/2 (h2c) clients of `url`'s host; with distinct_sources each binds its own 127.0.0.x, like distinct hosts."""
    return [
        EagerH2Client.of(url, f"127.0.0.{10 + index}" if distinct_sources else None, timeout_s)
        for index in range(count)
    ]


def _drawn(rng: random.Random, rate_at: Callable[[float], float], clients: int) -> Iterator[tuple[float, int]]:
    """Poisson arrivals at the rate of their moment, each from the next client in turn."""
    at, sent = 0.0, 0
    while True:
        sent += 1
        yield at, sent % clients
        at += rng.expovariate(max(1e-3, rate_at(at)))


async def open_loop(
    url: str,
    body: bytes,
    rate: float | Callable[[float], float],
    duration_s: float,
    clients: int = 16,
    timeout_s: float = 30.0,
    seed: int = 0,
    content_type: str = "image/png",
    warmup_s: float = 0.0,
    schedule: Sequence[tuple[float, int]] | None = None,
) -> LoadStats:
    """Offer `rate` requests/s for `duration_s` to POST `url`; wait for every reply before returning.

    `rate` may be a function of the seconds since the start (a load step), read at each arrival. With
    `warmup_s`, arrivals run that much longer, from the start, and what they send in the first `warmup_s`
    is answered but not counted: the stats hold the steady state, as the simulator's scenarios measure.
    A `schedule` of (seconds from the start, client index) replaces the drawn arrivals (then `rate` is not
    read): the simulator's arrivals of a scenario, sent by the same clients (common random numbers).
    """
    rate_at = rate if callable(rate) else (lambda _t, r=float(rate): r)
    rng = random.Random(seed)
    stats = LoadStats()
    pool = client_pool(url, clients, timeout_s)
    _, _, path = split_url(url)

    async def one(client: EagerH2Client, request_id: str, stats: LoadStats, sent_s: float) -> None:
        started = time.perf_counter()
        try:
            reply = await client.post(path, body, {"content-type": content_type, "x-request-id": request_id})
        except (OSError, TimeoutError):  # H2ClientError is a ConnectionError
            stats.transport_errors += 1
            return
        if reply.headers.get("x-request-id") != request_id:
            stats.mixed_up += 1
        if reply.status_code == 200:
            stats.ok += 1
            stats.latencies_ms.append((time.perf_counter() - started) * 1000.0)
            stats.backends[reply.headers.get("x-backend", "?")] += 1
        else:
            stats.by_status[reply.status_code] += 1
            stats.refused_sent_s.append(sent_s)
            try:
                reason = str(reply.json().get("reason", ""))
            except ValueError:
                reason = ""
            stats.by_reason[f"{reply.status_code} {reason}"] += 1
            if not reason or (reply.status_code == 503 and "retry-after" not in reply.headers):
                stats.unclear += 1

    warming = LoadStats()  # what the warm-up sends: answered and awaited, never reported
    tasks = []
    start = time.perf_counter()
    sent = 0
    try:
        for next_at, client in schedule if schedule is not None else _drawn(rng, rate_at, clients):
            if next_at >= warmup_s + duration_s:
                break
            if not 0 <= client < clients:
                raise ValueError(f"schedule: client {client} of {clients}")
            delay = start + next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            counted = stats if next_at >= warmup_s else warming
            counted.sent += 1
            sent += 1
            tasks.append(asyncio.create_task(one(pool[client], f"load-{seed}-{sent}", counted, next_at)))
        stats.duration_s = time.perf_counter() - start - warmup_s
        await asyncio.gather(*tasks)
    finally:
        await asyncio.gather(*(client.aclose() for client in pool))
    return stats
