"""`depthserve up` as a user runs it: starts, serves a request, and leaves no process behind on SIGTERM."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import tritonclient.grpc

from depthserve.probes import free_port
from depthserve.testing.processes import descendants, pid_alive


def test_up_serves_and_stops_without_orphans(rgb_png: bytes) -> None:
    port, grpc_port = free_port(), free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "depthserve", "up", "--workers", "2", "--port", str(port)]
        + ["--grpc-port", str(grpc_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert up.stdout is not None
        line = up.stdout.readline()  # blocks until the cluster is ready (or up exits)
        assert line.strip() == f"depthserve ready at http://127.0.0.1:{port}", line or (
            up.stderr.read() if up.stderr else ""
        )
        family = descendants(up.pid)
        assert len(family) >= 3  # two workers and a gateway (plus granian's worker process)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=60
        )
        assert reply.status_code == 200
        assert np.load(io.BytesIO(reply.content)).shape == (48, 64)
        cluster = httpx.get(f"http://127.0.0.1:{port}/v1/cluster").json()
        assert [b["state"] for b in cluster["backends"]] == ["ready", "ready"]
        oip = tritonclient.grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")  # --grpc-port reaches the gateway
        assert oip.is_server_ready() and oip.is_model_ready("lingbot-depth")

        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
        stderr = up.stderr.read() if up.stderr else ""
        assert "Traceback" not in stderr
        deadline = time.monotonic() + 10
        while any(pid_alive(pid) for pid in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in family if pid_alive(pid)], "processes left running after depthserve up stopped"
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def test_up_restarts_a_worker_that_dies(rgb_png: bytes) -> None:
    port = free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "depthserve", "up", "--workers", "2", "--port", str(port), "--model", "synthetic"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert up.stdout is not None and up.stdout.readline().startswith("depthserve ready")
        workers = [pid for pid in descendants(up.pid) if " worker " in _cmdline(pid)]
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:  # the gateway first sees it gone, then back after restart and warm-up
            states = [b["state"] for b in httpx.get(f"{url}/v1/cluster").json()["backends"]]
            fresh = [pid for pid in descendants(up.pid) if " worker " in _cmdline(pid) and pid != workers[0]]
            if states == ["ready", "ready"] and len(fresh) == 2 and not pid_alive(workers[0]):
                break
            assert time.monotonic() < deadline, f"worker not restarted: {states}"
            time.sleep(0.2)
        reply = httpx.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=30)
        assert reply.status_code == 200
        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
        assert "restarting in 1s" in (up.stderr.read() if up.stderr else "")
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
