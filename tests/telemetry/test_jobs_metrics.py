"""Async jobs waiting for a worker show up in the gateway's /metrics: how many, and how old the oldest is."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from depthserve.testing.observed import observed_cluster, samples, scrape, value
from depthserve.testing.samples import png_bytes, seeded_image


@pytest.mark.slow
def test_queued_jobs_and_their_age_are_exported(tmp_path: Path) -> None:
    slow = ("--synthetic-ms", "500")  # one job at a time, half a second each: the rest wait
    with observed_cluster(tmp_path, workers=1, worker_args=slow, gateway_args=("--job-concurrency", "1")) as cluster:
        image = png_bytes(seeded_image(48, 64))
        for _ in range(4):
            reply = httpx.post(cluster.gateway_url + "/v1/jobs", content=image, headers={"content-type": "image/png"})
            assert reply.status_code == 202, reply.text
        after = samples(scrape(cluster.gateway_url + "/metrics"))
    assert value(after, "depthserve_gateway_jobs_queued") >= 2
    assert value(after, "depthserve_gateway_jobs_oldest_age_seconds") > 0
