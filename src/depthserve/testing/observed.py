"""A small cluster whose workers serve /metrics, and helpers to read Prometheus text, for observability tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from depthserve.probes import free_port
from depthserve.testing.processes import Proc, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image


@dataclass
class ObservedCluster:
    """Gateway URL, worker addresses and each worker's metrics URL."""

    gateway_url: str
    gateway: Proc
    workers: dict[str, Proc] = field(default_factory=dict)  # by gRPC address
    metrics_urls: dict[str, str] = field(default_factory=dict)  # by gRPC address

    def send(self, count: int, request_id: str = "") -> list[httpx.Response]:
        """Send `count` small depth requests to the gateway, one after another."""
        image = png_bytes(seeded_image(48, 64))
        headers = {"content-type": "image/png"}
        if request_id:
            headers["x-request-id"] = request_id
        with httpx.Client(base_url=self.gateway_url, timeout=30.0) as client:
            return [client.post("/v1/depth", content=image, headers=headers) for _ in range(count)]


@contextmanager
def observed_cluster(
    log_dir: Path,
    workers: int = 2,
    worker_args: Sequence[str] = (),
    gateway_args: Sequence[str] = ("--health-interval-s", "0.5"),
) -> Iterator[ObservedCluster]:
    """Start synthetic workers with a metrics port each and a gateway in front; stop them all afterwards."""
    procs: list[Proc] = []
    try:
        started: dict[str, Proc] = {}
        metrics: dict[str, str] = {}
        for index in range(workers):
            port = free_port()
            proc, address = start_worker(log_dir, "--metrics-port", str(port), *worker_args, name=f"worker{index}")
            procs.append(proc)
            started[address] = proc
            metrics[address] = f"http://127.0.0.1:{port}/metrics"
        gateway, url = start_gateway(log_dir, list(started), *gateway_args)
        procs.append(gateway)
        yield ObservedCluster(url, gateway, started, metrics)
    finally:
        for proc in procs:
            proc.stop()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> str:
    """GET a /metrics page and give its text (fails on a non-200)."""
    reply = httpx.get(url, timeout=10.0)
    reply.raise_for_status()
    return reply.text


def samples(text: str) -> Samples:
    """Parse Prometheus text into {(sample name, labels): value}."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(parsed: Samples, name: str, **labels: str) -> float:
    """Sum the samples of `name` whose labels include `labels` (0.0 when none)."""
    wanted = set(labels.items())
    return sum(v for (n, have), v in parsed.items() if n == name and wanted <= have)


def exported_names(text: str) -> set[str]:
    """Every name a query may use: family names and sample names (with _total, _bucket, _sum, _count)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
    return names
