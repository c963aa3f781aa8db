"""A gateway of two processes on one port: limits exact for the gateway as a whole, views of all of it."""

from __future__ import annotations

import socket
import threading
from collections import Counter
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from depthserve.testing.processes import descendants, start_gateway, start_worker, wait_until

PNG = {"Content-Type": "image/png"}


def post(url: str, body: bytes) -> httpx.Response:
    """One request on a connection of its own, so requests land on either process."""
    return httpx.post(f"{url}/v1/depth", content=body, headers=PNG, timeout=30)


def test_two_processes_serve_one_port_bound_once_and_count_rate_limits_together(tmp_path: Path, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path)
    gateway, url = start_gateway(tmp_path, [address], "--processes", "2", "--rate-limit", "6/min burst 6")
    try:
        assert len(descendants(gateway.pid)) >= 2  # two granian worker processes
        codes = Counter(post(url, rgb_png).status_code for _ in range(12))
        assert codes == {200: 6, 429: 6}  # one bucket for the client, whichever process answered
        cluster = httpx.get(f"{url}/v1/cluster").json()
        assert [p["process"] for p in cluster["processes"]] == [0, 1]
        assert cluster["admission"]["admitted"] == 6 and cluster["rate_limited"] == 6
        families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}
        answered = [s for s in families["depthserve_gateway_requests"].samples if s.labels["route"] == "/v1/depth"]
        assert {s.labels["process"] for s in families["process_cpu_seconds"].samples} == {"0", "1"}
        assert sum(s.value for s in answered if s.labels["code"] == "200") == 6
        port = int(url.rsplit(":", 1)[1])
        with socket.socket() as intruder:  # nobody can share the port, even asking for SO_REUSEPORT
            intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            with pytest.raises(OSError):
                intruder.bind(("127.0.0.1", port))
    finally:
        gateway.stop()
        worker.stop()


def test_two_processes_admit_exactly_the_gateway_wide_limit(tmp_path: Path, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path, "--synthetic-ms", "1500", "--max-batch-size", "8")
    gateway, url = start_gateway(tmp_path, [address], "--processes", "2", "--max-in-flight", "2", "--max-queue", "0")
    try:
        replies: list[httpx.Response] = []
        threads = [threading.Thread(target=lambda: replies.append(post(url, rgb_png))) for _ in range(6)]
        for thread in threads:
            thread.start()
        wait_until(lambda: httpx.get(f"{url}/v1/cluster").json()["admission"]["in_flight"] == 2, gateway, 10)
        for thread in threads:
            thread.join(30)
        codes = Counter(reply.status_code for reply in replies)
        assert codes == {200: 2, 503: 4}  # never more than two at once, over both processes
        assert {reply.json()["reason"] for reply in replies if reply.status_code == 503} == {"queue_full"}
    finally:
        gateway.stop()
        worker.stop()


def test_a_drain_reaches_every_process(tmp_path: Path, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path)
    gateway, url = start_gateway(tmp_path, [address], "--processes", "2")
    try:
        assert httpx.post(f"{url}/v1/cluster/{address}/drain").status_code == 200
        codes = Counter(post(url, rgb_png).status_code for _ in range(6))
        assert codes == {503: 6}  # no process still sends to the drained worker
        assert httpx.post(f"{url}/v1/cluster/{address}/undrain").status_code == 200
        assert Counter(post(url, rgb_png).status_code for _ in range(6)) == {200: 6}
    finally:
        gateway.stop()
        worker.stop()
