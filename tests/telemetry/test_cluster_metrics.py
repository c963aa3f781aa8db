"""Scrape /metrics of a running cluster (real processes) and watch counters and histograms move with traffic."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest

from depthserve.testing.observed import ObservedCluster, observed_cluster, samples, scrape, value

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObservedCluster]:
    """Two synthetic workers (JSON debug logs, metrics ports) behind one round-robin gateway (JSON logs)."""
    log_dir = tmp_path_factory.mktemp("observed")
    workers = ("--log-format", "json", "--log-level", "debug")
    gateway = ("--health-interval-s", "0.5", "--log-format", "json")
    with observed_cluster(log_dir, worker_args=workers, gateway_args=gateway) as running:
        yield running


def test_gateway_counts_requests_and_latency_per_backend(cluster: ObservedCluster) -> None:
    before = samples(scrape(cluster.gateway_url + "/metrics"))
    replies = cluster.send(20)
    assert [r.status_code for r in replies] == [200] * 20
    after = samples(scrape(cluster.gateway_url + "/metrics"))

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    depth = {"route": "/v1/depth", "model": "lingbot-depth", "code": "200"}
    assert grew("depthserve_gateway_requests_total", **depth) == 20
    assert grew("depthserve_gateway_request_duration_seconds_count", route="/v1/depth") == 20
    assert grew("depthserve_gateway_request_duration_seconds_bucket", route="/v1/depth", le="+Inf") == 20
    assert grew("depthserve_gateway_admission_wait_seconds_count") == 20
    for backend in cluster.workers:  # round robin: both backends answered, and each is counted under its name
        assert grew("depthserve_gateway_requests_total", backend=backend, **depth) > 0
        assert grew("depthserve_gateway_backend_request_duration_seconds_count", backend=backend) > 0
        assert grew("depthserve_gateway_backend_requests_total", backend=backend, outcome="ok") > 0
        assert value(after, "depthserve_gateway_backend_up", backend=backend) == 1.0
        assert value(after, "depthserve_gateway_backend_state", backend=backend, state="ready") == 1.0
        assert value(after, "depthserve_gateway_backend_gpu_memory_total_bytes", backend=backend) > 0
    assert sum(grew("depthserve_gateway_requests_total", backend=b, **depth) for b in cluster.workers) == 20
    assert value(after, "depthserve_build_info", component="gateway") == 1.0
    assert value(after, "depthserve_gateway_jobs_queued") == 0.0  # defined even with no job queue in use


def test_gateway_counts_refusals_by_status_code(cluster: ObservedCluster) -> None:
    before = samples(scrape(cluster.gateway_url + "/metrics"))
    reply = httpx.post(cluster.gateway_url + "/v1/depth", content=b"hello", headers={"content-type": "text/plain"})
    assert reply.status_code == 415
    after = samples(scrape(cluster.gateway_url + "/metrics"))
    labels = {"route": "/v1/depth", "code": "415", "backend": ""}
    assert (
        value(after, "depthserve_gateway_requests_total", **labels)
        - value(before, "depthserve_gateway_requests_total", **labels)
        == 1
    )


def test_workers_count_batches_requests_and_report_their_device(cluster: ObservedCluster) -> None:
    before = {address: samples(scrape(url)) for address, url in cluster.metrics_urls.items()}
    cluster.send(10)
    for address, url in cluster.metrics_urls.items():
        after = samples(scrape(url))
        old = before[address]
        assert value(after, "depthserve_worker_requests_total", outcome="ok") > value(
            old, "depthserve_worker_requests_total", outcome="ok"
        )
        assert value(after, "depthserve_worker_batch_size_count") > value(old, "depthserve_worker_batch_size_count")
        assert value(after, "depthserve_worker_batch_duration_seconds_count") > value(
            old, "depthserve_worker_batch_duration_seconds_count"
        )
        assert value(after, "depthserve_worker_request_duration_seconds_bucket", le="+Inf") > value(
            old, "depthserve_worker_request_duration_seconds_bucket", le="+Inf"
        )
        assert value(after, "depthserve_worker_ready") == 1.0
        assert value(after, "depthserve_worker_gpu_memory_total_bytes") > 0
        assert value(after, "process_resident_memory_bytes") > 0
        assert value(after, "depthserve_build_info", component="worker") == 1.0


def test_worker_logs_carry_the_clients_request_id(cluster: ObservedCluster) -> None:
    (reply,) = cluster.send(1, request_id="trace-me-0042")
    assert reply.headers["x-request-id"] == "trace-me-0042"
    backend = reply.headers["x-backend"]
    deadline = time.monotonic() + 10
    lines: list[dict[str, object]] = []
    while time.monotonic() < deadline and not lines:
        output = cluster.workers[backend].output().splitlines()
        lines = [json.loads(line) for line in output if "trace-me-0042" in line]
        time.sleep(0.1)
    assert lines, "the worker that answered logged nothing with the request id"
    assert all(line["request_id"] == "trace-me-0042" and line["component"] == "worker" for line in lines)
    gateway_lines = [json.loads(line) for line in cluster.gateway.output().splitlines() if line.strip()]
    assert gateway_lines and all(line["component"] == "gateway" for line in gateway_lines)  # granian's own too


def test_history_feed_shows_recent_qps_and_p99(cluster: ObservedCluster) -> None:
    cluster.send(10)
    deadline = time.monotonic() + 10
    points: list[dict[str, float]] = []
    while time.monotonic() < deadline:  # the current second is reported once it is complete
        points = httpx.get(cluster.gateway_url + "/v1/cluster/history", params={"window_s": 1}).json()["points"]
        if any(p["qps"] > 0 for p in points):
            break
        time.sleep(0.3)
    busy = [p for p in points if p["qps"] > 0]
    assert busy, points[-5:]
    assert all(p["p99_ms"] is not None and p["p99_ms"] > 0 for p in busy)


def _history_reads(cluster: ObservedCluster) -> float:
    """How many /v1/cluster/history requests the gateway has answered, from its own /metrics."""
    parsed = samples(scrape(f"{cluster.gateway_url}/metrics"))
    return value(parsed, "depthserve_gateway_requests_total", route="/v1/cluster/history")


def _watcher(cluster: ObservedCluster, sink: IO[str], ctrl_c_ignored: bool = False) -> subprocess.Popen[bytes]:
    """`depthserve status --watch` on the cluster, redrawing every 0.5 s, its output in `sink`."""
    command = [sys.executable, "-m", "depthserve", "status", "--watch", "--interval", "0.5"]
    command += ["--url", cluster.gateway_url]
    # A script's background job inherits SIGINT ignored: `ctrl_c_ignored` starts the watcher that way.
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ctrl_c_ignored else None
    return subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, preexec_fn=ignore)  # noqa: PLW1509


def _wait_for_history_reads(cluster: ObservedCluster, at_least: float) -> None:
    """Wait (bounded) until the gateway answered `at_least` history reads, not a fixed sleep: on a loaded
    machine a watcher's start alone takes seconds."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and _history_reads(cluster) < at_least:
        time.sleep(0.2)


def test_status_watch_shows_every_backend_live(cluster: ObservedCluster, tmp_path: Path) -> None:
    out = tmp_path / "watch.txt"
    before = _history_reads(cluster)  # the cluster is shared: earlier tests read the history too
    with out.open("w") as sink:
        watch = _watcher(cluster, sink)
        try:
            cluster.send(5)
            # Off a terminal rich draws only the last frame, at exit: wait until it fetched the history twice.
            _wait_for_history_reads(cluster, before + 2)
        finally:
            watch.send_signal(signal.SIGINT)
            code = watch.wait(20)
    text = out.read_text()
    assert code == 0, text
    for backend in cluster.workers:
        assert backend in text
    assert "QPS" in text and "p99" in text


@pytest.mark.parametrize("stop_with", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_status_watch_stops_cleanly_even_when_started_with_ctrl_c_ignored(
    cluster: ObservedCluster, tmp_path: Path, stop_with: signal.Signals
) -> None:
    # Python never raises KeyboardInterrupt where SIGINT was inherited ignored, and a watcher stopped with
    # Ctrl-C ran on for ever (seen in CI). SIGTERM used to kill it without its last frame.
    out = tmp_path / "watch.txt"
    before = _history_reads(cluster)
    with out.open("w") as sink:
        watch = _watcher(cluster, sink, ctrl_c_ignored=True)
        try:
            _wait_for_history_reads(cluster, before + 1)
        finally:
            watch.send_signal(stop_with)
            try:
                code = watch.wait(20)
            finally:
                watch.kill()
    assert code == 0, out.read_text()
    assert all(backend in out.read_text() for backend in cluster.workers)  # its last frame was drawn
