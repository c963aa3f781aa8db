"""Requests a hash policy binds to one backend: counted per backend, and against real processes, a worker the
hash overloads keeps its surplus in the gateway while requests bound for the idle worker beside it pass."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from depthserve.balancer import make_policy
from depthserve.gateway.edge.lanes import Lanes
from depthserve.testing.processes import start_gateway, start_worker, wait_until
from depthserve.testing.snapshots import request, snapshot


def test_a_lane_counts_regular_slots_and_paces_by_every_release() -> None:
    lanes = Lanes({"a:1": 2}.get)
    assert lanes.cap("a:1") == 2 and lanes.cap("b:1") is None and Lanes().cap("a:1") is None
    lane = ("m", "a:1")
    lanes.take(lane)
    lanes.take(lane)
    for second in range(3):
        lanes.give_back(lane, float(second), regular=second < 2)  # the last was an express slot, counted apart
    assert lanes.in_flight == {}  # both regular slots given back, and the empty lane dropped
    assert lanes.rate(lane) is None  # three releases are too few to say
    lanes.give_back(lane, 3.0, regular=False)
    assert lanes.rate(lane) == 1.0


def test_a_lane_idle_for_a_while_is_forgotten_unless_it_holds_a_slot() -> None:
    lanes = Lanes()
    busy, idle = ("m", "busy:1"), ("m", "idle:1")
    for moment in range(4):
        lanes.give_back(idle, float(moment), regular=False)
        lanes.give_back(busy, float(moment), regular=False)
    lanes.take(busy)
    lanes.prune(before=10.0)
    assert lanes.rate(idle) is None and lanes.rate(busy) == 1.0  # memory follows backends that serve


def config(tmp_path: Path) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text("probe_inference_every: 0\n")
    return str(path)


def test_a_request_bound_for_an_idle_worker_passes_the_surplus_of_one_the_hash_overloads(
    tmp_path: Path, rgb_png: bytes
) -> None:
    """Six clients the hash sends to a slow worker (600 ms a request, one at a time) ask at once and fill the
    model's four slots (one each: none is light beside another, so no express slot); the client the hash sends
    to the idle fast worker is answered before the slow worker finishes its first. Under the model's cap alone
    it waited for the slow worker's first reply."""
    slow, slow_address = start_worker(tmp_path, "--synthetic-ms", "600", name="slow")
    fast, fast_address = start_worker(tmp_path, name="fast")
    ring = make_policy("ip_hash")
    pool = snapshot(slow_address, fast_address)
    homes = {f"127.0.0.{i}": ring.pick(pool, request(client=f"127.0.0.{i}"))[0] for i in range(10, 90)}
    slow_clients = [ip for ip, home in homes.items() if home == slow_address][:7]
    fast_client = next(ip for ip, home in homes.items() if home == fast_address)
    gateway, url = start_gateway(
        tmp_path, [slow_address, fast_address], "--policy", "ip_hash", "--config", config(tmp_path)
    )
    answered: dict[str, tuple[int, float]] = {}
    try:

        def send(name: str, source: str) -> None:
            transport = httpx.HTTPTransport(local_address=source)
            with httpx.Client(transport=transport, timeout=30) as client:
                reply = client.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"})
            answered[name] = (reply.status_code, time.monotonic())

        def admission() -> tuple[int, int]:
            state = httpx.get(f"{url}/v1/cluster").json()["admission"]
            return state["in_flight"], state["queued"]["normal"]

        send("warm-fast", fast_client)  # each worker's report tells the gateway what it runs at once
        send("warm-slow", slow_clients[6])
        wait_until(lambda: admission() == (0, 0), gateway, 10)  # the warm-ups' slots are given back
        threads = [threading.Thread(target=send, args=(f"slow{i}", slow_clients[i])) for i in range(6)]
        for thread in threads:
            thread.start()
        wait_until(lambda: sum(admission()) == 6, gateway, 10)
        assert admission() == (4, 2)  # the model's four slots held by the slow worker's clients, two waiting
        send("fast", fast_client)  # bound for the fast worker, which has room: it does not wait behind them
        for thread in threads:
            thread.join(30)
        statuses = sorted(status for status, _ in answered.values())
        assert statuses == [200] * 9  # sent 9, answered 9: none refused, none lost
        first_slow = min(at for name, (_, at) in answered.items() if name.startswith("slow"))
        assert answered["fast"][1] < first_slow
    finally:
        gateway.stop()
        slow.stop()
        fast.stop()
