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

from depthserve.probes import free_port
from depthserve.testing.processes import descendants, pid_alive


def test_up_serves_and_stops_without_orphans(rgb_png: bytes) -> None:
    port = free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "depthserve", "up", "--workers", "2", "--port", str(port)],
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
