"""One autoscaling run: `depthserve up --autoscale` with synthetic workers under a stepped open-loop load,
every request counted and the gateway's scaling signal sampled; shared by the test and bench/autoscale.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from depthserve.probes import free_port
from depthserve.testing.load import LoadStats, open_loop
from depthserve.testing.processes import Proc, wait_until
from depthserve.testing.samples import png_bytes, seeded_image
from depthserve.testing.scaling_timeline import Timeline

CHANGE = re.compile(r"autoscale: (\d+) -> (\d+) workers")


@dataclass(frozen=True)
class Phase:
    """Offered load as a share of one worker's capacity, for a while."""

    share: float
    seconds: float


@dataclass
class AutoscaleRun:
    """What happened: the load's accounting, the signal's samples, phase start times, the scaler's log lines."""

    stats: LoadStats
    timeline: Timeline
    phase_starts: list[float]
    log: str
    capacity_rps: float
    metrics: str  # the gateway's /metrics at the end of the load

    def scaler_changes(self) -> list[tuple[int, int]]:
        """(from, to) of each change the local scaler logged."""
        return [(int(a), int(b)) for a, b in CHANGE.findall(self.log)]


def cluster_env(service_ms: float, down_window_s: float, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Settings of the children of `up` (they read DEPTHSERVE_* from the environment)."""
    return {
        "DEPTHSERVE_WORKER_SYNTHETIC_MS": str(service_ms),
        "DEPTHSERVE_WORKER_WARMUP_LEVELS": "[0]",
        "DEPTHSERVE_WORKER_DRAIN_NOTICE_S": "1",  # gateways notice a drain within a health interval or two
        "DEPTHSERVE_GATEWAY_HEALTH_INTERVAL_S": "0.3",
        "DEPTHSERVE_GATEWAY_HEALTHY_THRESHOLD": "1",
        "DEPTHSERVE_GATEWAY_SLOW_START_S": "0",
        "DEPTHSERVE_GATEWAY_SCALE_DOWN_WINDOW_S": str(down_window_s),
        "DEPTHSERVE_GATEWAY_SCALE_RATE_WINDOW_S": "2",
        **(extra or {}),
    }


def _settled(log: str) -> bool:
    """Whether every worker the scaler let go has been seen to exit."""
    return log.count("autoscale: draining") == log.count(" retired")


async def run_autoscale(
    log_dir: Path,
    phases: Sequence[Phase],
    bounds: str = "1:4",
    service_ms: float = 40.0,
    down_window_s: float = 3.0,
    extra_env: dict[str, str] | None = None,
    up_args: Sequence[str] = (),
) -> AutoscaleRun:
    """Start the cluster, offer the phases back to back, then stop the cluster; give the run's record."""
    port = free_port()
    env = cluster_env(service_ms, down_window_s, extra_env)
    up = Proc(
        ["up", "--model", "synthetic", "--workers", "1", "--autoscale", bounds, "--port", str(port), *up_args],
        log_dir / "up.log",
        env={**env, "COLUMNS": "200"},
    )
    url = f"http://127.0.0.1:{port}"
    capacity = 1000.0 / service_ms
    try:
        await asyncio.to_thread(wait_until, lambda: "depthserve ready at" in up.output(), up, 120.0)
        starts, elapsed = [], 0.0
        for phase in phases:
            starts.append(elapsed)
            elapsed += phase.seconds

        def rate(t: float) -> float:
            share = next((p.share for s, p in zip(reversed(starts), reversed(phases), strict=True) if t >= s), 0.0)
            return share * capacity

        timeline = Timeline(url)
        recording = asyncio.create_task(timeline.record())
        body = png_bytes(seeded_image(48, 64))
        stats = await open_loop(f"{url}/v1/depth", body, rate=rate, duration_s=elapsed, clients=8, timeout_s=30.0)
        await asyncio.sleep(0.5)
        recording.cancel()
        await asyncio.gather(recording, return_exceptions=True)
        # A worker drained in the load's last second is still finishing its drain notice: the record ends
        # once every worker let go has exited, so the log holds each retirement the run started.
        await asyncio.to_thread(wait_until, lambda: _settled(up.output()), up, 30.0)
        async with httpx.AsyncClient(timeout=5.0) as client:
            metrics = (await client.get(f"{url}/metrics")).text
        return AutoscaleRun(stats, timeline, starts, up.output(), capacity, metrics)
    finally:
        up.stop(timeout=30.0)
