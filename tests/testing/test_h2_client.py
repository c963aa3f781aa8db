"""The load generator's HTTP/2 client: every reply reaches its caller when it arrives, nothing is lost or mixed up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from depthserve.testing.h2_client import EagerH2Client, H2ClientError
from depthserve.testing.processes import start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image


async def timed_post(client: EagerH2Client, body: bytes, request_id: str) -> tuple[float, int, str, str]:
    started = time.perf_counter()
    reply = await client.post("/v1/depth", body, {"content-type": "image/png", "x-request-id": request_id})
    return time.perf_counter() - started, reply.status_code, reply.headers["x-request-id"], reply.headers["x-backend"]


def test_a_fast_reply_is_not_held_behind_slow_ones_on_the_same_connection(tmp_path: Path) -> None:
    # httpx's HTTP/2 hands a reply over only when its stream's turn on a read lock comes, and streams queued
    # there before it block on the socket in turn: on this cluster one of its fast replies took 1.76 s.
    fast, fast_address = start_worker(tmp_path, "--synthetic-ms", "5", name="fast")
    slow, slow_address = start_worker(tmp_path, "--synthetic-ms", "1000", name="slow")
    gateway, url = start_gateway(tmp_path, [fast_address, slow_address], "--slow-start-s", "0")
    body = png_bytes(seeded_image(32, 32))

    async def staggered() -> list[tuple[float, int, str, str]]:
        client = EagerH2Client.of(url)

        async def one(index: int) -> tuple[float, int, str, str]:
            await asyncio.sleep(0.05 * index)  # each sent while the slow ones before it wait on the connection
            return await timed_post(client, body, f"r{index}")

        try:
            return await asyncio.gather(*(one(index) for index in range(8)))
        finally:
            await client.aclose()

    try:
        replies = asyncio.run(staggered())
    finally:
        gateway.stop()
        fast.stop()
        slow.stop()
    assert [status for _, status, _, _ in replies] == [200] * 8
    assert [rid for _, _, rid, _ in replies] == [f"r{i}" for i in range(8)], "each caller got its own reply"
    by_fast = [seconds for seconds, _, _, backend in replies if backend == fast_address]
    by_slow = [seconds for seconds, _, _, backend in replies if backend == slow_address]
    assert len(by_fast) == len(by_slow) == 4, "round robin alternates"
    assert min(by_slow) >= 0.9, "the slow worker's replies took its second each"
    assert max(by_fast) < 0.5, f"fast replies arrived while slow ones were pending, not after them ({by_fast})"


def test_a_large_body_is_sent_within_the_servers_window_and_a_timeout_leaves_the_connection_usable(
    tmp_path: Path,
) -> None:
    worker, address = start_worker(tmp_path, "--synthetic-ms", "300")
    gateway, url = start_gateway(tmp_path, [address])
    large = png_bytes(seeded_image(480, 640))  # far more than HTTP/2's initial 64 KiB window
    small = png_bytes(seeded_image(32, 32))

    async def run() -> tuple[int, type[BaseException] | None, int]:
        client = EagerH2Client.of(url)
        try:
            big = await client.post("/v1/depth", large, {"content-type": "image/png"}, timeout_s=10.0)
            failure: type[BaseException] | None = None
            try:
                await client.post("/v1/depth", small, {"content-type": "image/png"}, timeout_s=0.1)
            except TimeoutError as error:
                failure = type(error)
            after = await client.post("/v1/depth", small, {"content-type": "image/png"}, timeout_s=10.0)
            return big.status_code, failure, after.status_code
        finally:
            await client.aclose()

    try:
        assert len(large) > 4 * 65536
        big, failure, after = asyncio.run(run())
    finally:
        gateway.stop()
        worker.stop()
    assert big == 200, "the whole large body arrived"
    assert failure is TimeoutError, "a request past its timeout fails as one"
    assert after == 200, "the connection still serves after a stream was given up"


def test_requests_in_flight_fail_clearly_when_the_gateway_dies(tmp_path: Path) -> None:
    worker, address = start_worker(tmp_path, "--synthetic-ms", "1000")
    gateway, url = start_gateway(tmp_path, [address])
    body = png_bytes(seeded_image(32, 32))

    async def run() -> list[BaseException | object]:
        client = EagerH2Client.of(url)
        try:
            headers = {"content-type": "image/png"}
            pending = [asyncio.create_task(client.post("/v1/depth", body, headers)) for _ in range(2)]
            await asyncio.sleep(0.3)
            gateway.kill()
            async with asyncio.timeout(10.0):
                return await asyncio.gather(*pending, return_exceptions=True)
        finally:
            await client.aclose()

    try:
        outcomes = asyncio.run(run())
    finally:
        gateway.stop()
        worker.stop()
    assert len(outcomes) == 2
    for outcome in outcomes:
        assert isinstance(outcome, H2ClientError), f"a clear connection error, not a hang or a reply ({outcome!r})"


def test_a_refusal_comes_back_with_its_status_and_json_reason(tmp_path: Path) -> None:
    worker, address = start_worker(tmp_path)
    gateway, url = start_gateway(tmp_path, [address])

    async def run() -> tuple[int, object]:
        client = EagerH2Client.of(url)
        try:
            body = png_bytes(seeded_image(8, 8))
            reply = await client.post("/v1/depth?model=nope", body, {"content-type": "image/png"})
            return reply.status_code, reply.json().get("reason")
        finally:
            await client.aclose()

    try:
        status, reason = asyncio.run(run())
    finally:
        gateway.stop()
        worker.stop()
    assert status == 404 and reason, "the gateway's refusal and its reason, read from the JSON body"
