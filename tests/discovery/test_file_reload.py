"""A gateway following a backends file: edits add and remove workers under load, and no request fails."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from tests.discovery.test_redis_cluster import gateway_config, members, wait_for

from depthserve.testing.load import open_loop
from depthserve.testing.processes import start_gateway, start_worker

pytestmark = pytest.mark.timeout(120)


def write(path: Path, addresses: list[str]) -> None:
    """Replace the file atomically (write, then rename), so the gateway never reads half a list."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("backends:\n" + "".join(f"  - {a}\n" for a in addresses))
    os.replace(tmp, path)


def ready(url: str) -> set[str]:
    return {a for a, b in members(url).items() if b["state"] == "ready"}


async def test_file_edits_under_load_fail_no_request(tmp_path: Path, rgb_png: bytes) -> None:
    workers = [start_worker(tmp_path, "--synthetic-ms", "10", "--warmup-levels", "0", name=f"w{i}") for i in range(3)]
    a, b, c = (address for _, address in workers)
    listing = tmp_path / "backends.yaml"
    write(listing, [a])
    gateway, url = start_gateway(tmp_path, [], "--discovery", f"file://{listing}", "--config", gateway_config(tmp_path))
    try:
        running = asyncio.create_task(open_loop(f"{url}/v1/depth", rgb_png, rate=50, duration_s=8.0, clients=8))
        await asyncio.sleep(1.0)
        write(listing, [a, b, c])
        await wait_for(lambda: ready(url) == {a, b, c}, timeout=15)
        await asyncio.sleep(1.5)
        write(listing, [c])  # two leave at once while requests are in flight on them
        await wait_for(lambda: set(members(url)) == {c}, timeout=15)
        await asyncio.sleep(1.0)
        write(listing, [b, c])
        await wait_for(lambda: ready(url) == {b, c}, timeout=15)
        stats = await running
        print(
            f"\nfile reload: sent {stats.sent}, ok {stats.ok}, failed {stats.failed} {dict(stats.by_status)}, "
            f"transport {stats.transport_errors}, per backend {dict(stats.backends)}"
        )
        assert stats.failed == 0 and stats.ok == stats.sent > 0 and stats.mixed_up == 0
        assert set(stats.backends) == {a, b, c}
    finally:
        gateway.stop()
        for proc, _ in workers:
            proc.stop()
