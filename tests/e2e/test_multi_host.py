"""Four hosts on one machine (network namespaces on a bridge): a gateway, two workers and a Redis registry.

Requests cross veth links; one worker's link is cut (it is ejected, no client request fails) and
restored (it registers again and takes traffic). Needs root and `ip netns`; skips with the reason
otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from depthserve.probes import grpc_serving, http_ready
from depthserve.testing.processes import Proc, wait_until

pytestmark = pytest.mark.timeout(180)
HOSTS = {"gw": 1, "w1": 2, "w2": 3, "rg": 4}  # host name -> last octet of its address
REDIS_PORT = 6390
WORKER_PORT = 50051
GATEWAY_PORT = 8000


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def netns_available() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None or shutil.which("redis-server") is None:
        return "needs `ip` (iproute2) and `redis-server`"
    probe = f"dsprobe{uuid.uuid4().hex[:6]}"
    try:
        ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"`ip netns add` failed: {getattr(exc, 'stderr', b'').decode(errors='replace').strip() or exc}"
    ip("netns", "del", probe)
    return None


def free_subnet() -> str:
    """A 10.251.X.0/24 prefix no route on this machine uses yet."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True, check=True).stdout
    for third in range(os.getpid() % 200, 250):
        prefix = f"10.251.{third}."
        if prefix not in routes:
            return prefix
    raise RuntimeError("no free 10.251.X.0/24 subnet")


@dataclass
class Net:
    """The namespaces, links and addresses of one test's hosts; `close` removes all of it."""

    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])
    prefix: str = field(default_factory=free_subnet)
    made: list[str] = field(default_factory=list)

    def ns(self, host: str) -> str:
        return f"ds{self.tag}{host}"

    def addr(self, host: str) -> str:
        return f"{self.prefix}{HOSTS[host]}"

    def build(self) -> None:
        switch = self.ns("sw")
        ip("netns", "add", switch)
        self.made.append(switch)
        ip("-n", switch, "link", "add", "br0", "type", "bridge")
        ip("-n", switch, "link", "set", "br0", "up")
        for host in HOSTS:
            name = self.ns(host)
            ip("netns", "add", name)
            self.made.append(name)
            inner, outer = f"dv{self.tag}{host}", f"ds{self.tag}{host}"
            ip("link", "add", inner, "type", "veth", "peer", "name", outer)
            ip("link", "set", inner, "netns", name)
            ip("-n", name, "link", "set", inner, "name", "eth0")
            ip("link", "set", outer, "netns", switch)
            ip("-n", switch, "link", "set", outer, "master", "br0", "up")
            ip("-n", name, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0")
            ip("-n", name, "link", "set", "eth0", "up")
            ip("-n", name, "link", "set", "lo", "up")
        # The test itself (root namespace) is a client host too, through one more veth on the bridge.
        ip("link", "add", f"dr{self.tag}", "type", "veth", "peer", "name", f"ds{self.tag}rt")
        ip("link", "set", f"ds{self.tag}rt", "netns", switch)
        ip("-n", switch, "link", "set", f"ds{self.tag}rt", "master", "br0", "up")
        ip("addr", "add", f"{self.prefix}254/24", "dev", f"dr{self.tag}")
        ip("link", "set", f"dr{self.tag}", "up")

    def link(self, host: str, up: bool) -> None:
        ip("-n", self.ns(host), "link", "set", "eth0", "up" if up else "down")

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            ip("link", "del", f"dr{self.tag}")
        for name in reversed(self.made):
            with contextlib.suppress(subprocess.CalledProcessError):
                ip("netns", "del", name)


@pytest.fixture
def net() -> Iterator[Net]:
    reason = netns_available()
    if reason is not None:
        pytest.skip(f"multi-host test skipped: {reason}")
    topology = Net()
    try:
        topology.build()
        yield topology
    finally:
        topology.close()


@dataclass
class Tally:
    """Every request sent, in exactly one of ok or failed."""

    sent: int = 0
    ok: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    backends: Counter[str] = field(default_factory=Counter)


async def steady_load(url: str, body: bytes, rate: float, stop: asyncio.Event, tally: Tally) -> None:
    """Send `rate` requests/s until `stop`, each counted; wait for every reply."""
    transport = httpx.AsyncHTTPTransport(http1=False, http2=True)
    async with httpx.AsyncClient(transport=transport, timeout=30) as client:

        async def one() -> None:
            try:
                reply = await client.post(f"{url}/v1/depth", content=body, headers={"Content-Type": "image/png"})
            except httpx.HTTPError as exc:
                tally.failed[type(exc).__name__] += 1
                return
            if reply.status_code == 200:
                tally.ok += 1
                tally.backends[reply.headers["x-backend"]] += 1
            else:
                tally.failed[str(reply.status_code)] += 1

        tasks = []
        while not stop.is_set():
            tally.sent += 1
            tasks.append(asyncio.create_task(one()))
            await asyncio.sleep(1 / rate)
        await asyncio.gather(*tasks)


def states(url: str) -> dict[str, str]:
    return {b["address"]: b["state"] for b in httpx.get(f"{url}/v1/cluster", timeout=5).json()["backends"]}


async def until(check: object, timeout: float) -> float:
    assert callable(check)
    started = time.monotonic()
    while not await asyncio.to_thread(check):
        assert time.monotonic() - started < timeout, "condition not reached in time"
        await asyncio.sleep(0.1)
    return time.monotonic() - started


async def test_gateway_and_workers_on_separate_hosts(net: Net, tmp_path: Path, rgb_png: bytes) -> None:
    registry = f"redis://{net.addr('rg')}:{REDIS_PORT}/0"
    with (tmp_path / "redis.log").open("wb") as log:
        redis = subprocess.Popen(
            ["ip", "netns", "exec", net.ns("rg"), "redis-server", "--port", str(REDIS_PORT), "--bind", net.addr("rg"),
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    procs: list[Proc] = []
    try:
        config = tmp_path / "gateway.yaml"
        config.write_text(
            "health_interval_s: 0.3\nhealth_timeout_s: 0.5\nhealthy_threshold: 1\nunhealthy_threshold: 2\n"
            "slow_start_s: 0\nper_try_timeout_s: 1.0\ndiscovery_poll_s: 0.3\n"
        )
        worker_flags = ["--host", "0.0.0.0", "--port", str(WORKER_PORT), "--model", "synthetic", "--synthetic-ms", "10",
                        "--warmup-levels", "0", "--discovery", registry, "--registry-ttl-s", "1.5"]  # fmt: skip
        # w1 names its address; w2 finds it: the address on its path towards the registry.
        advertise = {"w1": ["--advertise", net.addr("w1")], "w2": []}
        for host in ("w1", "w2"):
            prefix = ["ip", "netns", "exec", net.ns(host)]
            procs.append(Proc(["worker", *worker_flags, *advertise[host]], tmp_path / f"{host}.log", prefix=prefix))
        gateway = Proc(
            ["gateway", "--host", "0.0.0.0", "--port", str(GATEWAY_PORT), "--discovery", registry,
             "--config", str(config)],
            tmp_path / "gateway.log", prefix=["ip", "netns", "exec", net.ns("gw")],
        )  # fmt: skip
        procs.append(gateway)
        url = f"http://{net.addr('gw')}:{GATEWAY_PORT}"
        w1, w2 = (f"{net.addr(h)}:{WORKER_PORT}" for h in ("w1", "w2"))
        for proc, address in zip(procs, (w1, w2), strict=False):
            wait_until(lambda a=address: grpc_serving(a), proc)
        wait_until(lambda: http_ready(url) and states(url) == {w1: "ready", w2: "ready"}, gateway)

        tally, stop = Tally(), asyncio.Event()
        load = asyncio.create_task(steady_load(url, rgb_png, 30.0, stop, tally))
        await asyncio.sleep(2.0)
        net.link("w1", up=False)  # w1's cable pulled: in-flight requests time out per try and go to w2
        out_after = await until(lambda: states(url).get(w1) != "ready", timeout=15)
        await asyncio.sleep(3.0)
        served_by_w1 = tally.backends[w1]
        await asyncio.sleep(1.0)
        assert tally.backends[w1] == served_by_w1  # nothing reaches it while the link is down
        net.link("w1", up=True)
        back_after = await until(lambda: states(url).get(w1) == "ready", timeout=30)
        await until(lambda: tally.backends[w1] > served_by_w1, timeout=15)  # and it takes traffic again
        await asyncio.sleep(1.0)
        stop.set()
        await load
        print(
            f"\nmulti-host: sent {tally.sent}, ok {tally.ok}, failed {dict(tally.failed)}, per backend "
            f"{dict(tally.backends)}; w1 out {out_after:.1f}s after the cut, back {back_after:.1f}s after restore"
        )
        assert tally.failed == Counter() and tally.ok == tally.sent > 0
        assert set(tally.backends) == {w1, w2}
    finally:
        for proc in procs:
            proc.stop()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(redis.pid, signal.SIGTERM)
        redis.wait(10)
