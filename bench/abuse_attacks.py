"""The attackers of bench/abuse.py, each in its own process so the normal clients' timing stays clean.

    python bench/abuse_attacks.py {slow-upload,unread-reply,overload} --port PORT --source 127.0.0.3 --size 1

Prints `ready` once the attack is at full strength, holds it until SIGTERM (or --max-seconds), closes
every socket and prints one JSON line of counts. Slow uploads and unread replies keep a fixed number of
sockets or streams open, re-opening with backoff what the gateway answers or resets, so the attack's
cost to this machine is bounded whatever the gateway does; the overload is an open loop at a fixed rate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import math
import os
import random
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
from h2.exceptions import ProtocolError

sys.path.insert(0, str(Path(__file__).parent))
from h2_client import H2Client, Stream  # noqa: E402

from depthserve.testing.samples import png_bytes, seeded_image  # noqa: E402

HOST = "127.0.0.1"
DECLARED_BYTES = 32 * 1024 * 1024  # what each slow upload promises: the gateway's default body limit
TRICKLE_BYTES = 16  # sent each second by half of the slow uploads; the other half send nothing
STREAMS_PER_CONNECTION = 100
UNREAD_WINDOW = 1024  # the unread-reply client's flow-control window: the gateway can send it 1 KiB per stream
UNREAD_PER_CONNECTION = 8
UNREAD_SIDE = 2048  # a 2048x2048 image: its depth as .npy is a 16 MiB reply
READY_WAIT_S = 10.0
MAX_OVERLOAD_CONNECTIONS = 32  # of up to 200 streams each
MAX_BATCH = 50  # most overload arrivals sent in one event-loop tick when behind schedule


@functools.cache
def small_png() -> bytes:
    """The 64x64 PNG that trickles and overload requests carry (encoded once)."""
    return png_bytes(seeded_image(64, 64))


class Backoff:
    """Per-slot delay before re-opening: doubles while the gateway answers at once, resets after a long hold."""

    def __init__(self) -> None:
        self.delay = 0.5

    async def wait(self, held_s: float) -> None:
        self.delay = 0.5 if held_s > 4.0 else min(4.0, self.delay * 2)
        await asyncio.sleep(self.delay)


class Tally:
    """Counts shared by an attack's slots, and the moment every slot first got going."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.counts: Counter[str] = Counter()
        self.holding = 0
        self.started: set[int] = set()
        self.all_started = asyncio.Event()

    def start(self, slot: int) -> None:
        self.started.add(slot)
        if len(self.started) >= self.target:
            self.all_started.set()


async def h1_slow_upload(port: int, source: str, slot: int, trickle: bool, tally: Tally) -> None:
    """One HTTP/1.1 socket that declares a 32 MiB body and sends nothing (or a trickle), re-opened when answered."""
    head = (
        f"POST /v1/depth HTTP/1.1\r\nHost: {HOST}:{port}\r\nContent-Type: image/png\r\n"
        f"Content-Length: {DECLARED_BYTES}\r\n\r\n"
    ).encode()
    body = small_png()
    backoff = Backoff()
    while True:
        try:
            reader, writer = await asyncio.open_connection(HOST, port, local_addr=(source, 0))
        except OSError:
            tally.counts["connect_failed"] += 1
            await backoff.wait(0.0)
            continue
        opened = time.monotonic()
        tally.counts["opened"] += 1
        tally.holding += 1
        tally.start(slot)
        sent = 0
        try:
            writer.write(head)
            while True:
                try:
                    async with asyncio.timeout(1.0):  # not wait_for: on 3.11 it can swallow the final cancel
                        answer = await reader.read(256)
                except TimeoutError:
                    if trickle:
                        writer.write(body[sent : sent + TRICKLE_BYTES])
                        sent += TRICKLE_BYTES
                    continue
                parts = answer.split(b" ", 2)
                tally.counts[parts[1].decode() if answer.startswith(b"HTTP/") and len(parts) > 1 else "closed"] += 1
                break
        except OSError:
            tally.counts["closed"] += 1
        finally:
            tally.holding -= 1
            writer.close()
        await backoff.wait(time.monotonic() - opened)


class Reconnecting:
    """An h2c connection shared by several slots, re-opened on first use after it closes."""

    def __init__(self, port: int, source: str, window: int | None, tally: Tally) -> None:
        self.port, self.source, self.window, self.tally = port, source, window, tally
        self.client: H2Client | None = None
        self.lock = asyncio.Lock()

    async def get(self) -> H2Client:
        async with self.lock:
            if self.client is None or self.client.closed:
                self.client = await H2Client.open(HOST, self.port, self.source, self.window)
                self.tally.counts["connections"] += 1
            return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


async def h2_slot(
    connection: Reconnecting,
    slot: int,
    tally: Tally,
    send: Callable[[H2Client], Stream],
    while_open: Callable[[H2Client, Stream], Awaitable[None]],
) -> None:
    """Keep one stream open on a shared connection: start it, hold it until the gateway ends it, start another."""
    backoff = Backoff()
    while True:
        try:
            client = await connection.get()
        except OSError:
            tally.counts["connect_failed"] += 1
            await backoff.wait(0.0)
            continue
        try:
            stream = send(client) if client.room > 0 else None
        except ProtocolError:  # the connection is closing
            stream = None
        if stream is None:
            await backoff.wait(0.0)
            continue
        opened = time.monotonic()
        tally.counts["opened"] += 1
        tally.holding += 1
        tally.start(slot)
        try:
            while not stream.done.done():
                await while_open(client, stream)
        finally:
            tally.holding -= 1
        tally.counts[str(stream.status) if stream.status else stream.done.result()] += 1
        await backoff.wait(time.monotonic() - opened)


async def hold_open(client: H2Client, stream: Stream) -> None:
    """Leave a stream alone for a second at a time: its reply stays unread."""
    await asyncio.wait({stream.done}, timeout=1.0)


async def slow_uploads(args: argparse.Namespace, tasks: list[asyncio.Task[None]], closers: list[Reconnecting]) -> Tally:
    """Half HTTP/1.1 sockets, half HTTP/2 streams (100 per connection), each holding an upload open."""
    per_protocol = max(1, round(400 * args.size))
    tally = Tally(2 * per_protocol)
    body = small_png()
    headers = [("content-type", "image/png"), ("content-length", str(DECLARED_BYTES))]
    for slot in range(per_protocol):
        tasks.append(asyncio.create_task(h1_slow_upload(args.port, args.source, slot, slot % 2 == 1, tally)))
    for first in range(0, per_protocol, STREAMS_PER_CONNECTION):
        connection = Reconnecting(args.port, args.source, None, tally)
        closers.append(connection)
        for slot in range(first, min(per_protocol, first + STREAMS_PER_CONNECTION)):

            async def trickle(client: H2Client, stream: Stream, slot: int = slot) -> None:
                await asyncio.wait({stream.done}, timeout=1.0)
                if slot % 2 and not stream.done.done():
                    offset = int(time.perf_counter() - stream.started) * TRICKLE_BYTES
                    client.send(stream, body[offset : offset + TRICKLE_BYTES])

            tasks.append(
                asyncio.create_task(
                    h2_slot(
                        connection,
                        per_protocol + slot,
                        tally,
                        lambda client: client.request("/v1/depth", headers, end=False),
                        trickle,
                    )
                )
            )
    return tally


async def unread_replies(
    args: argparse.Namespace, tasks: list[asyncio.Task[None]], closers: list[Reconnecting]
) -> Tally:
    """Streams that ask for a 16 MiB .npy reply over a 1 KiB flow-control window and never open it wider."""
    total = max(1, round(16 * args.size))
    tally = Tally(total)
    image = png_bytes(np.zeros((UNREAD_SIDE, UNREAD_SIDE, 3), dtype=np.uint8))
    headers = [("content-type", "image/png"), ("accept-encoding", "identity")]
    for first in range(0, total, UNREAD_PER_CONNECTION):
        connection = Reconnecting(args.port, args.source, UNREAD_WINDOW, tally)
        closers.append(connection)
        for slot in range(first, min(total, first + UNREAD_PER_CONNECTION)):
            tasks.append(
                asyncio.create_task(
                    h2_slot(
                        connection, slot, tally, lambda c: c.request("/v1/depth?format=npy", headers, image), hold_open
                    )
                )
            )
    return tally


async def overload(args: argparse.Namespace, stop: asyncio.Event) -> dict[str, Any]:
    """Open-loop Poisson arrivals at `rate` req/s over up to 32 connections; every reply's status and latency."""
    rate = args.rate * args.size
    image = small_png()
    headers = [("content-type", "image/png")]
    rng = random.Random(args.seed)
    clients = [await H2Client.open(HOST, args.port, args.source) for _ in range(4)]
    statuses: Counter[str] = Counter()
    refused_ms: list[float] = []
    ok_ms: list[float] = []
    waiting: set[asyncio.Future[str]] = set()

    def record(stream: Stream, _: object) -> None:
        waiting.discard(stream.done)
        statuses[str(stream.status) if stream.done.result() == "ended" and stream.status else "transport_error"] += 1
        if stream.status == 503:
            refused_ms.append(stream.elapsed_ms)
        elif stream.status == 200:
            ok_ms.append(stream.elapsed_ms)

    async def send_one() -> None:
        client = max(clients, key=lambda c: c.room)
        if client.room <= 0 and len(clients) < MAX_OVERLOAD_CONNECTIONS:
            try:
                client = await H2Client.open(HOST, args.port, args.source)
            except OSError:
                statuses["connect_failed"] += 1
                return
            clients.append(client)
        try:
            stream = client.request("/v1/depth", headers, image) if client.room > 0 else None
        except ProtocolError:  # the connection is closing
            stream = None
        if stream is None:
            statuses["client_full"] += 1
            return
        waiting.add(stream.done)
        stream.done.add_done_callback(functools.partial(record, stream))

    print("ready", flush=True)
    per_10ms: Counter[int] = Counter()  # arrivals sent in each 10 ms: how far from Poisson the CPU let it stay
    start = time.perf_counter()
    next_at = 0.0
    sent = 0
    while not stop.is_set():
        delay = start + next_at - time.perf_counter()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await stop.wait()
            continue
        for _ in range(MAX_BATCH):  # every arrival already due goes out before the next yield: fewer writes
            if start + next_at > time.perf_counter():
                break
            next_at += rng.expovariate(rate)
            sent += 1
            per_10ms[int(time.perf_counter() * 100)] += 1
            await send_one()
        await asyncio.sleep(0)  # even when behind schedule, let replies and the stop signal in
    window_s = time.perf_counter() - start
    if waiting:
        await asyncio.wait(waiting, timeout=args.grace_s)
    for client in clients:
        await client.close()
    return {
        "sent": sent,
        "rate": rate,
        "window_s": window_s,
        "statuses": dict(statuses),
        "unfinished": len(waiting),
        "refused_ms": refused_ms,
        "ok_ms": ok_ms,
        "max_per_10ms": max(per_10ms.values(), default=0),
        "poisson_max_per_10ms": poisson_max(rate / 100.0, max(1, round(window_s * 100))),
    }


def poisson_max(mean: float, windows: int) -> int:
    """The count a Poisson process of this mean per window exceeds in fewer than one of `windows` windows."""
    count, term = 0, math.exp(-mean)
    tail = 1.0 - term
    while tail * windows >= 1.0:
        count += 1
        term *= mean / count
        tail -= term
    return count


async def probe(args: argparse.Namespace, stop: asyncio.Event) -> dict[str, Any]:
    """One request at a time from the attacker's address, `rate` a second: how fast a refused client hears no.

    The overload generator's own timings include its event loop's lag at hundreds of requests a
    second; this probe has nothing else to do, and it speaks HTTP/1.1 over a blocking socket in a
    thread (a prepared request, a reply read by length), so its few microseconds of client work do not
    hide in its timings the way an HTTP/2 client's milliseconds of Python per request did.
    """
    halt = threading.Event()
    stop_waiter = asyncio.ensure_future(stop.wait())
    stop_waiter.add_done_callback(lambda _: halt.set())
    try:
        return await asyncio.to_thread(probe_loop, args, halt)
    finally:
        stop_waiter.cancel()


def probe_loop(args: argparse.Namespace, halt: threading.Event) -> dict[str, Any]:
    """The probe's blocking loop: send, read the whole reply, time it, wait out the rest of 1/rate.

    With --floor-port each request to the gateway is followed by the same request to the floor server
    (bench/floor_server.py, on the gateway's core), timed the same way: the machine's own floor, side by side.
    """
    body = small_png()
    request = (
        f"POST /v1/depth HTTP/1.1\r\nhost: {HOST}:{args.port}\r\ncontent-type: image/png\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    statuses: Counter[str] = Counter()
    refused_ms: list[float] = []
    floor_ms: list[float] = []
    connection = ProbeConnection(args.source, args.port, args.grace_s)
    connection.exchange(f"GET /healthz HTTP/1.1\r\nhost: {HOST}:{args.port}\r\n\r\n".encode())  # connected first
    floor = ProbeConnection(args.source, args.floor_port, args.grace_s) if args.floor_port else None
    print("ready", flush=True)
    while not halt.is_set():
        started = time.perf_counter()
        try:
            status, payload = connection.exchange(request)
        except OSError as exc:
            statuses[type(exc).__name__] += 1
            connection.reconnect()
            halt.wait(1.0 / args.rate)
            continue
        took_ms = (time.perf_counter() - started) * 1000.0
        reason = "" if status == 200 else f" {json.loads(payload).get('reason', '')}"
        statuses[f"{status}{reason}"] += 1
        if status == 503:
            refused_ms.append(took_ms)
            if floor is not None:
                started = time.perf_counter()
                floor.exchange(request)
                floor_ms.append((time.perf_counter() - started) * 1000.0)
        halt.wait(1.0 / args.rate)
    connection.close()
    if floor is not None:
        floor.close()
    return {"statuses": dict(statuses), "refused_ms": refused_ms, "floor_ms": floor_ms}


class ProbeConnection:
    """One keep-alive HTTP/1.1 connection from a chosen loopback address, replies read by Content-Length."""

    def __init__(self, source: str, port: int, timeout_s: float) -> None:
        self.source, self.port, self.timeout_s = source, port, timeout_s
        self.reconnect()

    def reconnect(self) -> None:
        """Open a fresh connection (after the gateway closed one, or at the start)."""
        self.sock = socket.create_connection((HOST, self.port), self.timeout_s, source_address=(self.source, 0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = self.sock.makefile("rb")

    def exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send one request; give the reply's status and body (chunked or by length)."""
        self.sock.sendall(request)
        status_line = self.reader.readline()
        if not status_line:
            raise ConnectionResetError("the gateway closed the connection")  # an OSError: the loop reconnects
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding") == "chunked":
            payload = b""
            while size := int(self.reader.readline(), 16):
                payload += self.reader.read(size)
                self.reader.readline()
            self.reader.readline()
        else:
            payload = self.reader.read(int(headers.get("content-length", "0")))
        if headers.get("connection") == "close":
            self.close()
            self.reconnect()
        return status, payload

    def close(self) -> None:
        """Close the socket and its reader."""
        self.reader.close()
        self.sock.close()


def answered(connections: list[Reconnecting], status: int | None = None) -> int:
    """Open streams whose reply headers came (with `status`, if given): replies the gateway holds for us."""
    return sum(
        1
        for c in connections
        if c.client is not None
        for s in c.client.streams.values()
        if s.status is not None and (status is None or s.status == status)
    )


async def hold_attack(args: argparse.Namespace, stop: asyncio.Event) -> dict[str, Any]:
    """Run a slot-based attack until `stop`; cancel every slot and close every socket."""
    tasks: list[asyncio.Task[None]] = []
    closers: list[Reconnecting] = []
    tally = await (slow_uploads if args.kind == "slow-upload" else unread_replies)(args, tasks, closers)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(READY_WAIT_S):
            await tally.all_started.wait()
    deadline = time.monotonic() + READY_WAIT_S
    while args.kind == "unread-reply" and answered(closers) < tally.target and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # full strength once the gateway holds every reply: their headers came
    print("ready", flush=True)
    await stop.wait()
    holding, replies_held = tally.holding, answered(closers, 200)
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks, timeout=5.0)  # bounded: exiting the process closes whatever is left
    for closer in closers:
        await closer.close()
    return {"target": tally.target, "holding": holding, "replies_held": replies_held, "counts": dict(tally.counts)}


async def main_async(args: argparse.Namespace) -> None:
    if args.kind != "probe":
        # An attacker may use every spare cycle, never the measuring clients' or the workers' (on a small
        # machine its CPU would otherwise show up as their latency): SCHED_IDLE runs it only when nothing
        # else wants the core, and a waking client or worker takes the core from it at once. Where that
        # class is refused, nice 19. What it achieved is reported.
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):
            os.nice(19)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.call_later(args.max_seconds, stop.set)
    run = {"overload": overload, "probe": probe}.get(args.kind, hold_attack)
    result = await run(args, stop)
    print(json.dumps({"kind": args.kind, "size": args.size, **result}), flush=True)  # before asyncio.run's clean-up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("slow-upload", "unread-reply", "overload", "probe"))
    parser.add_argument("--port", type=int, required=True, help="the gateway's port on 127.0.0.1")
    parser.add_argument("--source", default="127.0.0.3", help="loopback address the attack comes from")
    parser.add_argument("--size", type=float, default=1.0, help="scales sockets, streams and the overload rate")
    parser.add_argument("--rate", type=float, default=500.0, help="overload: req/s at size 1")
    parser.add_argument("--grace-s", type=float, default=6.0, help="overload: wait this long for replies after stop")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--floor-port", type=int, default=0, help="probe: also time the floor server on this port")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="stop on its own after this long")
    args = parser.parse_args()
    if not args.source.startswith("127.") or not math.isfinite(args.size) or args.size <= 0:
        raise SystemExit("loopback sources and a positive size only")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
