"""Real gateway and worker processes under attack: uploads that never arrive, replies that are never read.

Attackers connect from 127.0.0.2 and normal clients from 127.0.0.3 (both reach loopback on Linux),
so the gateway sees two clients. Every request sent is counted as answered or failed.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from depthserve.testing.h2_attack import RawH2
from depthserve.testing.processes import Proc, descendants, start_gateway, start_worker
from depthserve.testing.samples import png_bytes

ATTACKER, NORMAL = "127.0.0.2", "127.0.0.3"
PNG = {"content-type": "image/png"}


def rss_mb(proc: Proc) -> float:
    """Resident memory of a gateway: its launcher and granian's server process together."""
    total_kb = 0
    for pid in {proc.pid, *descendants(proc.pid)}:
        try:
            with open(f"/proc/{pid}/status") as status:
                total_kb += next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            continue
    return total_kb / 1024


class PeakRss:
    """Samples a process tree's RSS in a thread until stopped; keeps the highest."""

    def __init__(self, proc: Proc) -> None:
        self.peak = rss_mb(proc)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(proc,), daemon=True)
        self._thread.start()

    def _run(self, proc: Proc) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_mb(proc))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text("probe_inference_every: 0\n" + text)
    return str(path)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[str]:
    proc, address = start_worker(tmp_path, "--warmup-levels", "0")
    yield address
    proc.stop()


async def normal_traffic(url: str, image: bytes, count: int, at_once: int = 4) -> Counter[int | str]:
    """Requests from the normal client, `at_once` in flight; gives their statuses (200), else the error's reason."""
    statuses: Counter[int | str] = Counter()
    transport = httpx.AsyncHTTPTransport(local_address=NORMAL, http2=True)
    async with httpx.AsyncClient(transport=transport, timeout=30) as client:

        async def one() -> None:
            try:
                reply = await client.post(f"{url}/v1/depth", content=image, headers=PNG)
                statuses[200 if reply.status_code == 200 else f"{reply.status_code} {reply.text[:200]}"] += 1
            except httpx.HTTPError as exc:
                statuses[f"transport error {exc!r}"] += 1

        for start in range(0, count, at_once):
            await asyncio.gather(*(one() for _ in range(min(at_once, count - start))))
    return statuses


async def until(condition: object, timeout: float = 60.0) -> None:
    """Wait until `condition()` holds (fails the test after `timeout`)."""
    assert callable(condition)
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


def attack_in_place(url: str) -> bool:
    """Whether the gateway holds all it will of the HTTP/2 attack: 16 uploads now, every slot and queue place before."""
    held = {
        name: float(value)
        for name, value in (line.rsplit(" ", 1) for line in httpx.get(f"{url}/metrics").text.splitlines() if line)
        if not name.startswith("#")
    }
    queued = sum(value for name, value in held.items() if name.startswith("depthserve_gateway_admission_queued{"))
    return held.get("depthserve_gateway_uploads") == 16 or (held["depthserve_gateway_in_flight"] == 4 and queued == 4)


async def stalled_http11(port: int, declared: int) -> tuple[asyncio.StreamWriter, asyncio.Task[bytes]]:
    """An HTTP/1.1 upload that declares a body and never sends it; the task gives the status line."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(ATTACKER, 0))
    head = f"POST /v1/depth HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: {declared}\r\n\r\n"
    writer.write(head.encode())
    return writer, asyncio.ensure_future(reader.readline())


def test_stalled_uploads_hold_no_admission_slot(tmp_path: Path, worker: str, rgb_png: bytes) -> None:
    """40 uploads that never send their body, over HTTP/2 and HTTP/1.1, against 4 slots and 4 queue places.

    They used to take every slot and queue place for the whole upload timeout (everyone else got 503
    queue_full); now they hold only their own client's upload budget and time out with 408.
    """
    gateway, url = start_gateway(
        tmp_path,
        [worker],
        "--max-in-flight",
        "4",
        "--max-queue",
        "4",
        "--upload-timeout-s",
        "10",
        "--config",
        config(tmp_path, "client_uploads: 16\n"),
    )
    port = int(url.rsplit(":", 1)[1])

    async def attack_and_serve() -> tuple[Counter[int], Counter[int | str], float]:
        h2 = await RawH2.open("127.0.0.1", port, ATTACKER)
        for _ in range(20):
            h2.post("/v1/depth", {**PNG, "content-length": str(1_000_000)}, end=False)
        await until(lambda: attack_in_place(url))
        sockets = [await stalled_http11(port, 1_000_000) for _ in range(20)]
        # the HTTP/2 uploads hold what the gateway lets them; the HTTP/1.1 ones are refused
        await until(lambda: sum(task.done() for _, task in sockets) == 20)
        base = rss_mb(gateway)
        normal = await normal_traffic(url, rgb_png, 24)
        growth = rss_mb(gateway) - base
        assert normal == {200: 24}, normal  # normal clients are served while the attack holds
        lines = [await task for _, task in sockets]
        await until(lambda: sum(h2.seen.statuses.values()) == 20)  # held ones end with 408 after the upload timeout
        for writer, _ in sockets:
            writer.close()
        await h2.close()
        return h2.seen.statuses + Counter(int(line.split()[1]) for line in lines), normal, growth

    try:
        attacker, normal, rss_growth = asyncio.run(attack_and_serve())
    finally:
        gateway.stop()
    assert sum(attacker.values()) == 40, attacker  # every stalled upload was answered
    assert attacker == {408: 16, 429: 24}, attacker  # 16 held until timed out, the rest refused as too many
    assert rss_growth < 100, f"gateway RSS grew by {rss_growth:.0f} MB"


def test_replies_nobody_reads_stay_within_the_reply_budget(tmp_path: Path, worker: str, rgb_png: bytes) -> None:
    """Two HTTP/2 connections ask for 48 replies of 4 MiB and never read them (a 1 KiB window each).

    The gateway used to keep every reply whole until the client closed (~200 MB here); now the replies
    being written count against an 8 MiB per-connection budget (48 MiB in all, so two connections
    cannot fill it), writers time out after 1 s, and normal clients are still served.
    """
    gateway, url = start_gateway(
        tmp_path,
        [worker],
        "--max-in-flight",
        "8",
        "--config",
        config(tmp_path, "reply_write_timeout_s: 1\nconnection_reply_memory_mb: 8\nmax_reply_memory_mb: 48\n"),
    )
    port = int(url.rsplit(":", 1)[1])
    big = png_bytes(np.zeros((1024, 1024, 3), np.uint8))  # a small upload whose depth (.npy) is 4 MiB

    async def attack_and_serve() -> tuple[list[RawH2], Counter[int | str], Counter[int | str], float]:
        warm = await normal_traffic(url, big, 8)  # the baseline includes the allocator's working set
        base = rss_mb(gateway)
        peak = PeakRss(gateway)
        attackers = [await RawH2.open("127.0.0.1", port, ATTACKER) for _ in range(2)]
        for attacker in attackers:
            for _ in range(24):
                attacker.post("/v1/depth", PNG, big)
        await until(lambda: sum(sum(a.seen.statuses.values()) for a in attackers) == 48)  # all answered
        statuses = await normal_traffic(url, rgb_png, 16) + await normal_traffic(url, big, 4)
        growth = peak.stop() - base
        for attacker in attackers:
            await attacker.close()
        return attackers, warm, statuses, growth

    try:
        attackers, warm, statuses, rss_growth = asyncio.run(attack_and_serve())
        held = httpx.get(f"{url}/metrics").text
    finally:
        gateway.stop()
    assert warm == {200: 8}
    assert statuses == {200: 20}, statuses  # normal clients, small and large replies, all served
    assert rss_growth < 150, f"gateway RSS grew by {rss_growth:.0f} MB"
    attack = sum((a.seen.statuses for a in attackers), Counter[int]())
    assert set(attack) <= {200, 503} and attack[503] > 0, attack  # replies past a connection's budget: 503
    assert "depthserve_gateway_reply_bytes_held 0.0" in held  # all of it freed once the attackers left


def test_large_uploads_stay_within_the_request_memory_budget(tmp_path: Path) -> None:
    """Ten 20 MiB uploads at once against a 64 MiB budget of request bodies.

    Each upload used to cost about three copies (~60 MB each here, all accepted: ~600 MB); now each is
    copied once and the bodies held at once stay under the budget: the rest get 503 upload_memory_full.
    """
    worker, address = start_worker(tmp_path, "--warmup-levels", "0", "--synthetic-ms", "500", "--max-batch-size", "16")
    gateway, url = start_gateway(
        tmp_path, [address], "--config", config(tmp_path, "max_request_memory_mb: 64\nclient_uploads: 64\n")
    )
    upload = png_bytes(np.zeros((48, 64, 3), np.uint8)) + bytes(20 * 1024 * 1024)  # a PNG with 20 MiB after it

    async def send_all() -> tuple[list[httpx.Response], float]:
        async with httpx.AsyncClient(timeout=60) as client:
            await client.post(f"{url}/v1/depth", content=upload[:5000], headers=PNG)  # connections and allocator warm
            base = rss_mb(gateway)
            peak = PeakRss(gateway)
            replies = await asyncio.gather(
                *(client.post(f"{url}/v1/depth", content=upload, headers=PNG) for _ in range(10))
            )
            return replies, peak.stop() - base

    try:
        replies, rss_growth = asyncio.run(send_all())
    finally:
        gateway.stop()
        worker.stop()
    assert rss_growth < 300, f"gateway RSS grew by {rss_growth:.0f} MB"
    statuses = Counter(reply.status_code for reply in replies)
    reasons = Counter(reply.json().get("reason") for reply in replies if reply.status_code != 200)
    # Every upload answered, and some served: a refused upload gives its bytes back before it is drained,
    # so uploads racing for the budget cannot all be refused together (as they were on a loaded machine).
    assert set(statuses) <= {200, 503} and statuses[200] >= 1, (statuses, reasons)
    refused = [reply for reply in replies if reply.status_code == 503]
    assert refused and all(reply.json()["reason"] == "upload_memory_full" for reply in refused), statuses
    assert all("retry-after" in reply.headers for reply in refused)
