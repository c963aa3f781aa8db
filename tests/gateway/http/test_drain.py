"""Operators drain a backend through the gateway (`depthserve drain`): no new requests, then resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from depthserve.testing.processes import start_gateway, start_worker


def drain_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "depthserve", "drain", *args], capture_output=True, text=True, timeout=60
    )


def test_drain_and_undrain(tmp_path: Path, rgb_png: bytes) -> None:
    (first, a), (second, b) = start_worker(tmp_path, name="a"), start_worker(tmp_path, name="b")
    gateway, url = start_gateway(tmp_path, [a, b])
    try:
        done = drain_cli(a, "--url", url)
        assert done.returncode == 0 and f"{a}: draining" in done.stdout
        used = {
            httpx.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=30).headers[
                "x-backend"
            ]
            for _ in range(6)
        }
        assert used == {b}
        states = {x["address"]: x["state"] for x in httpx.get(f"{url}/v1/cluster").json()["backends"]}
        assert states == {a: "draining", b: "ready"}
        assert drain_cli(a, "--undrain", "--url", url).returncode == 0
        used = {
            httpx.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=30).headers[
                "x-backend"
            ]
            for _ in range(6)
        }
        assert used == {a, b}
        unknown = drain_cli("10.9.9.9:1", "--url", url)
        assert unknown.returncode == 1 and "no backend" in unknown.stdout
        assert httpx.post(f"{url}/v1/cluster/{a}/explode").status_code == 404
    finally:
        gateway.stop()
        first.stop()
        second.stop()
