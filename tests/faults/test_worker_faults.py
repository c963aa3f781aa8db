"""Fault drills with real processes under open-loop load: every request is counted.

Each test reports sent / answered / failed / mixed-up, and what the gateway did about it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from depthserve.probes import grpc_serving
from depthserve.testing.load import LoadStats, open_loop
from depthserve.testing.processes import Proc, start_gateway, start_worker, wait_until

GATEWAY_FLAGS = ["--health-interval-s", "0.5", "--config"]
RATE = 60.0  # requests/s offered; three workers at 20 ms serve 150/s


def gateway_config(tmp_path: Path) -> str:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "health_timeout_s: 0.5\nunhealthy_threshold: 2\nhealthy_threshold: 2\nper_try_timeout_s: 1.0\n"
        "probe_inference_every: 2\nslow_start_s: 0\n"
    )
    return str(config)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, Any]]:
    workers = [start_worker(tmp_path, "--synthetic-ms", "20", "--warmup-levels", "0", name=f"w{i}") for i in range(3)]
    gateway, url = start_gateway(tmp_path, [a for _, a in workers], *GATEWAY_FLAGS, gateway_config(tmp_path))
    yield {"url": url, "workers": workers, "gateway": gateway, "logs": tmp_path}
    gateway.stop()
    for proc, _ in workers:
        proc.stop()


def backend_state(url: str, address: str) -> str:
    backends = httpx.get(f"{url}/v1/cluster", timeout=5).json()["backends"]
    return next(b["state"] for b in backends if b["address"] == address)


def report(name: str, stats: LoadStats, url: str, **extra: object) -> None:
    view = httpx.get(f"{url}/v1/cluster", timeout=5).json()
    print(
        f"\n{name}: sent {stats.sent}, ok {stats.ok}, failed {stats.failed} {dict(stats.by_status)}, "
        f"mixed up {stats.mixed_up}, retries {view['retries']} (refused {view['retries_refused']})",
        " ".join(f"{k} {v}" for k, v in extra.items()),
        # Where the replies came from and how each backend ends: a backend out of rotation shows here.
        "\nreplies by backend:",
        ", ".join(f"{b['address']} {stats.backends[b['address']]} ({b['state']})" for b in view["backends"]),
    )


def assert_all_answered(stats: LoadStats) -> None:
    assert stats.sent > 0
    assert stats.failed == 0, f"{stats.failed} failed: {dict(stats.by_status)}, transport {stats.transport_errors}"
    assert stats.ok == stats.sent and stats.mixed_up == 0


async def load(url: str, seconds: float, body: bytes) -> LoadStats:
    return await open_loop(f"{url}/v1/depth", body, rate=RATE, duration_s=seconds, clients=8, timeout_s=30)


async def test_sigkill_costs_clients_nothing(cluster: dict[str, Any], rgb_png: bytes) -> None:
    url = cluster["url"]
    victim, address = cluster["workers"][0]
    running = asyncio.create_task(load(url, 6.0, rgb_png))
    await asyncio.sleep(2.0)
    victim.kill()
    killed_at = time.monotonic()
    while await asyncio.to_thread(backend_state, url, address) == "ready":
        await asyncio.sleep(0.05)
    out_after = time.monotonic() - killed_at
    stats = await running
    report("SIGKILL", stats, url, out_after_s=f"{out_after:.2f}")
    assert_all_answered(stats)
    assert backend_state(url, address) in ("unhealthy", "ejected")


async def test_sigstop_is_ejected_and_readmitted_after_sigcont(cluster: dict[str, Any], rgb_png: bytes) -> None:
    url = cluster["url"]
    frozen, address = cluster["workers"][1]
    running = asyncio.create_task(load(url, 8.0, rgb_png))
    await asyncio.sleep(1.5)
    frozen.popen.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        while await asyncio.to_thread(backend_state, url, address) == "ready":
            await asyncio.sleep(0.05)
        out_after = time.monotonic() - stopped_at
    finally:
        await asyncio.sleep(2.0)
        frozen.popen.send_signal(signal.SIGCONT)
    stats = await running
    back = time.monotonic()
    while await asyncio.to_thread(backend_state, url, address) != "ready":
        assert time.monotonic() - back < 15, "not re-admitted after SIGCONT"
        await asyncio.sleep(0.1)
    report("SIGSTOP", stats, url, out_after_s=f"{out_after:.2f}", bound_s="0.5 x 2 + 0.5 (+20% jitter)")
    assert_all_answered(stats)
    assert out_after < 0.5 * 2 + 0.5 * 1.2 + 1.0  # probe timeout x threshold + interval, plus scheduling slack


async def test_new_worker_gets_traffic_only_after_warm_up(tmp_path: Path, rgb_png: bytes) -> None:
    workers = [start_worker(tmp_path, "--synthetic-ms", "20", "--warmup-levels", "0", name=f"w{i}") for i in range(2)]
    # The late worker holds its port from the start (a port merely chosen could be taken by another test's
    # server before it bound it) and warms up for 300 x 20 ms, so it joins part-way through the load; a
    # request reaching it before it is warm would be refused and counted.
    late, late_address = start_worker(
        tmp_path,
        "--synthetic-ms",
        "20",
        "--warmup-levels",
        "0",
        "--warmup-requests",
        "300",
        name="late",
        serving=False,
    )
    gateway, url = start_gateway(
        tmp_path, [a for _, a in workers] + [late_address], *GATEWAY_FLAGS, gateway_config(tmp_path)
    )
    try:
        assert not grpc_serving(late_address), "the late worker was warm before the load began: nothing tested"
        running = asyncio.create_task(load(url, 10.0, rgb_png))
        await asyncio.to_thread(wait_until, lambda: grpc_serving(late_address), late, 30.0)
        stats = await running
        late_view = next(b for b in httpx.get(f"{url}/v1/cluster").json()["backends"] if b["address"] == late_address)
        report("late join", stats, url, late_served=late_view["served"])
        assert_all_answered(stats)
        assert late_view["served"] > 0  # it did join
        late.stop()
        assert "refused before ready 0" in late.output()  # nothing reached it before it was warm
    finally:
        late.stop()
        gateway.stop()
        for proc, _ in workers:
            proc.stop()


async def test_rolling_restart_under_load(cluster: dict[str, Any], rgb_png: bytes) -> None:
    url, logs = cluster["url"], cluster["logs"]
    running = asyncio.create_task(load(url, 12.0, rgb_png))
    await asyncio.sleep(1.0)
    for index, (proc, address) in enumerate(list(cluster["workers"])):
        assert await asyncio.to_thread(proc.stop) == 0  # SIGTERM: drain, then exit cleanly
        port = address.rsplit(":", 1)[1]
        fresh = Proc(
            ["worker", "--port", port, "--model", "synthetic", "--synthetic-ms", "20", "--warmup-levels", "0"],
            logs / f"restarted-{index}.log",
        )
        cluster["workers"][index] = (fresh, address)
        while await asyncio.to_thread(backend_state, url, address) != "ready":
            await asyncio.sleep(0.1)
    stats = await running
    report("rolling restart", stats, url)
    assert_all_answered(stats)


def test_deadline_shorter_than_service_gives_504_and_is_not_computed(tmp_path: Path, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path, "--synthetic-ms", "1000", "--warmup-levels", "0")
    config = tmp_path / "gateway.yaml"
    config.write_text("probe_inference_every: 0\n")  # only client requests reach the device
    gateway, url = start_gateway(tmp_path, [address], "--config", str(config))
    first: list[httpx.Response] = []
    try:
        busy = threading.Thread(
            target=lambda: first.append(
                httpx.post(f"{url}/v1/depth", content=rgb_png, timeout=30, headers={"Content-Type": "image/png"})
            )
        )
        busy.start()
        wait_until(lambda: httpx.get(f"{url}/v1/cluster").json()["backends"][0]["in_flight"] == 1, gateway, 10)
        reply = httpx.post(
            f"{url}/v1/depth",
            content=rgb_png,
            timeout=30,
            headers={"Content-Type": "image/png", "X-Request-Timeout": "0.3"},
        )
        assert reply.status_code == 504
        assert reply.json()["reason"] == "deadline" and "0.3" in reply.json()["error"]
        busy.join(30)
        assert first[0].status_code == 200
        bad = httpx.post(
            f"{url}/v1/depth",
            content=rgb_png,
            timeout=30,
            headers={"Content-Type": "image/png", "X-Request-Timeout": "soon"},
        )
        assert bad.status_code == 400
    finally:
        gateway.stop()
        worker.stop()
    # The expired request waited behind the first and was dropped, never computed.
    assert "served 1, failed 1, computed 1" in worker.output()


async def test_requests_stuck_on_a_sigstopped_worker_are_answered_by_the_other(tmp_path: Path, rgb_png: bytes) -> None:
    workers = [start_worker(tmp_path, "--synthetic-ms", "20", "--warmup-levels", "0", name=f"w{i}") for i in range(2)]
    (frozen, frozen_address), (_, other_address) = workers
    config = tmp_path / "stop.yaml"
    # The per-try timeout equals each request's deadline: a request left on the stopped worker would get
    # 504 after 8 s; only a second attempt sent when its health check stops answering saves it.
    config.write_text(
        "health_timeout_s: 0.3\nunhealthy_threshold: 2\nper_try_timeout_s: 8\nprobe_inference_every: 0\n"
        "slow_start_s: 0\n"
    )
    gateway, url = start_gateway(
        tmp_path, [frozen_address, other_address], "--health-interval-s", "0.3", "--config", str(config)
    )
    replies: list[tuple[bool, int, str]] = []  # (sent after the stop, status, backend)
    stopped = asyncio.Event()

    async def one(client: httpx.AsyncClient) -> None:
        after_stop = stopped.is_set()
        headers = {"Content-Type": "image/png", "X-Request-Timeout": "8"}
        reply = await client.post(f"{url}/v1/depth", content=rgb_png, headers=headers)
        replies.append((after_stop, reply.status_code, reply.headers.get("x-backend", "")))

    try:
        async with httpx.AsyncClient(http2=True, http1=False, timeout=30) as client:
            sending = []
            for index in range(60):  # 20/s for 3 s; the worker stops after the first 0.5 s
                if index == 10:
                    frozen.popen.send_signal(signal.SIGSTOP)
                    stopped.set()
                sending.append(asyncio.create_task(one(client)))
                await asyncio.sleep(0.05)
            await asyncio.gather(*sending)
        frozen.popen.send_signal(signal.SIGCONT)
        view = httpx.get(f"{url}/v1/cluster", timeout=5).json()
        answered = [reply for reply in replies if reply[1] == 200]
        late_by = Counter(backend for after_stop, status, backend in replies if after_stop and status == 200)
        print(
            f"\nSIGSTOP: sent {len(sending)}, answered {len(answered)}, failed {len(replies) - len(answered)} "
            f"{Counter(status for _, status, _ in replies if status != 200)}, sent after the stop answered by "
            f"{dict(late_by)}, retries {view['retries']}"
        )
        assert len(replies) == len(sending) == len(answered)  # nothing failed, nothing waited out its deadline
        assert set(late_by) == {other_address}  # everything sent after the stop was answered by the other worker
        assert view["retries"] >= 1  # some were stuck on the stopped worker and got a second attempt
    finally:
        frozen.popen.send_signal(signal.SIGCONT)
        gateway.stop()
        for proc, _ in workers:
            proc.stop()
