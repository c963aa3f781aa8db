"""What a client sees when workers are missing or die: a clear 503 JSON answer, never a hang."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from depthserve.probes import free_port
from depthserve.testing.processes import start_gateway, start_worker


def test_no_backend_reachable_gives_503_with_reason(tmp_path: Path, rgb_png: bytes) -> None:
    gateway, url = start_gateway(tmp_path, [f"127.0.0.1:{free_port()}"], wait_ready=False)
    try:
        with httpx.Client(http2=True, http1=False, timeout=10) as client:
            ready = client.get(f"{url}/readyz")
            assert ready.status_code == 503 and ready.json()["reason"] == "no_backend"
            reply = client.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"})
        assert reply.status_code == 503
        assert reply.json()["reason"] == "no_backend"
        assert reply.headers["retry-after"] == "1"
    finally:
        gateway.stop()


def test_worker_killed_mid_request_gives_clear_error(tmp_path: Path, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path, "--model", "synthetic", "--synthetic-ms", "5000")
    try:
        gateway, url = start_gateway(tmp_path, [address])
    except BaseException:
        worker.stop()
        raise
    replies: list[httpx.Response] = []

    def send() -> None:
        with httpx.Client(http2=True, http1=False, timeout=30) as client:
            replies.append(client.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}))

    try:
        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 10
        while httpx.get(f"{url}/v1/cluster").json()["backends"][0]["in_flight"] == 0:
            assert time.monotonic() < deadline, "request never reached the worker"
            time.sleep(0.05)
        worker.kill()
        sender.join(30)
        assert not sender.is_alive(), "client hung after the worker died"
        (reply,) = replies
        assert reply.status_code in (502, 503)
        assert reply.json()["reason"] == "backend_unavailable" and address in reply.json()["error"]
        assert gateway.alive()
        backend = httpx.get(f"{url}/v1/cluster").json()["backends"][0]
        assert backend["errors"] == 1 and backend["in_flight"] == 0
    finally:
        gateway.stop()
        worker.stop()
