"""The job API end to end: a real gateway and synthetic worker processes over real Redis and RabbitMQ."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests.conftest import require_service

from depthserve.jobs.broker import open_broker
from depthserve.testing.jobs import BROKER_URLS, SERVICES, clean_up, unique_namespace
from depthserve.testing.processes import Proc, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image

PNG = png_bytes(seeded_image(24, 32))


class Cluster:
    """Gateway and workers on one job namespace; `add_worker` starts another consumer later."""

    def __init__(
        self, tmp_path: Path, broker: str | None, *flags: str, workers: int = 1, gateway_flags: Sequence[str] = ()
    ) -> None:
        self.tmp_path = tmp_path
        self.broker_url = BROKER_URLS.get(broker or "")
        self.namespace = unique_namespace(f"api-{broker or 'inproc'}")
        self.flags = [*flags, "--job-namespace", self.namespace]
        if self.broker_url:
            self.flags += ["--broker", self.broker_url]
        self.procs: list[Proc] = []
        addresses = [self.add_worker() for _ in range(workers)]
        if not addresses:  # the gateway needs a backend for /v1/depth; this one pulls no jobs
            proc, address = start_worker(tmp_path, name="sync-only")
            self.procs.append(proc)
            addresses = [address]
        gateway, self.url = start_gateway(tmp_path, addresses, *self.flags, *gateway_flags)
        self.procs.append(gateway)

    def add_worker(self) -> str:
        proc, address = start_worker(self.tmp_path, *self.flags, name="jobs-worker")
        self.procs.append(proc)
        return address

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        asyncio.run(clean_up(self.broker_url, self.namespace))


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Any]:
    made: list[Cluster] = []

    def make(broker: str | None, *flags: str, workers: int = 1, gateway_flags: Sequence[str] = ()) -> Cluster:
        if broker:
            require_service(*SERVICES[broker])
            require_service(*SERVICES["redis"])  # job state lives in Redis whenever a broker is given
        cluster = Cluster(tmp_path, broker, *flags, workers=workers, gateway_flags=gateway_flags)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


def wait_state(client: httpx.Client, job_id: str, states: tuple[str, ...] = ("succeeded", "failed")) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        reply = client.get(f"/v1/jobs/{job_id}")
        body = reply.json()
        if reply.status_code != 200:
            raise AssertionError(f"job {job_id}: HTTP {reply.status_code} {body}")
        if body["state"] in states:
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} stuck: {body}")


@pytest.mark.parametrize("broker", ["redis", "amqp", None])
def test_submit_poll_and_fetch_the_result(cluster_factory: Any, broker: str | None) -> None:
    cluster = cluster_factory(broker)
    with httpx.Client(base_url=cluster.url) as client:
        reply = client.post("/v1/jobs", content=PNG, headers={"content-type": "image/png", "accept": "image/png"})
        assert reply.status_code == 202
        job_id = reply.json()["id"]
        assert reply.headers["location"] == reply.json()["status_url"] == f"/v1/jobs/{job_id}"
        done = wait_state(client, job_id)
        assert done["state"] == "succeeded" and done["attempts"] == 1 and done["error"] is None
        assert done["created_at"] <= done["started_at"] <= done["finished_at"]
        result = client.get(f"/v1/jobs/{job_id}/result", headers={"accept": "image/png"})
        assert result.status_code == 200 and result.headers["content-type"] == "image/png"
        assert result.content.startswith(b"\x89PNG")
        npy = client.get(f"/v1/jobs/{job_id}/result", headers={"accept": "application/x-npy"})
        assert npy.status_code == 406 and "choose the format when submitting" in npy.json()["error"]
        jobs = client.get("/v1/cluster").json()["jobs"]
        assert jobs["broker"] == (broker or "in_process") and jobs["queued"] == 0


def test_the_result_matches_the_synchronous_answer(cluster_factory: Any) -> None:
    cluster = cluster_factory("redis")
    with httpx.Client(base_url=cluster.url) as client:
        sync = client.post("/v1/depth", content=PNG, headers={"content-type": "image/png"})
        job_id = client.post("/v1/jobs", content=PNG, headers={"content-type": "image/png"}).json()["id"]
        wait_state(client, job_id)
        result = client.get(f"/v1/jobs/{job_id}/result")
        assert result.headers["content-type"] == sync.headers["content-type"] == "application/x-npy"
        assert np.array_equal(np.load(io.BytesIO(result.content)), np.load(io.BytesIO(sync.content)))


def test_idempotency_key_returns_the_existing_job(cluster_factory: Any, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("alice:plain:secret-a\nbob:plain:secret-b\n")
    cluster = cluster_factory("redis", gateway_flags=["--api-keys-file", str(keys)])
    with httpx.Client(base_url=cluster.url, headers={"x-api-key": "secret-a"}) as client:
        headers = {"content-type": "image/png", "idempotency-key": "upload-42"}
        first = client.post("/v1/jobs", content=PNG, headers=headers)
        again = client.post("/v1/jobs", content=PNG, headers=headers)
        other = client.post("/v1/jobs", content=PNG, headers={**headers, "idempotency-key": "upload-43"})
        assert (first.status_code, again.status_code, other.status_code) == (202, 200, 202)
        assert again.json()["id"] == first.json()["id"] != other.json()["id"]
        assert again.headers["idempotent-replayed"] == "true"
        bad = client.post("/v1/jobs", content=PNG, headers={**headers, "idempotency-key": "x" * 300})
        assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]
        job_id = first.json()["id"]
        assert wait_state(client, job_id)["state"] == "succeeded"
        assert client.get(f"/v1/jobs/{job_id}/result").status_code == 200
    with httpx.Client(base_url=cluster.url, headers={"x-api-key": "secret-b"}) as bob:
        mine = bob.post("/v1/jobs", content=PNG, headers=headers)  # the same key names bob's own job
        assert mine.status_code == 202 and mine.json()["id"] != job_id
        for reply in (
            bob.get(f"/v1/jobs/{job_id}"),
            bob.get(f"/v1/jobs/{job_id}/result"),
            bob.delete(f"/v1/jobs/{job_id}"),
        ):
            assert reply.status_code == 404 and reply.json()["reason"] == "job_not_found"  # alice's job is not there
        assert bob.get("/v1/jobs/" + "A" * 300).status_code == 404  # not an id we make: no lookup at all


def test_cancel_a_queued_job_and_not_a_finished_one(cluster_factory: Any) -> None:
    cluster = cluster_factory("redis", workers=0)  # nobody pulls jobs yet: they stay queued
    with httpx.Client(base_url=cluster.url) as client:
        queued = client.post("/v1/jobs", content=PNG, headers={"content-type": "image/png"}).json()["id"]
        kept = client.post("/v1/jobs", content=PNG, headers={"content-type": "image/png"}).json()["id"]
        jobs = client.get("/v1/cluster").json()["jobs"]
        assert jobs["queued"] == 2 and jobs["broker_depth"] == 2 and jobs["oldest_queued_age_s"] >= 0
        cancelled = client.delete(f"/v1/jobs/{queued}")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
        assert client.get(f"/v1/jobs/{queued}/result").status_code == 409
        cluster.add_worker()
        assert wait_state(client, kept)["state"] == "succeeded"
        late = client.delete(f"/v1/jobs/{kept}")
        assert late.status_code == 409 and "only a queued job" in late.json()["error"]
        assert client.get(f"/v1/jobs/{queued}").json()["attempts"] == 0  # its message was dropped, never run


def test_results_expire_after_the_ttl(cluster_factory: Any) -> None:
    cluster = cluster_factory("redis", "--job-ttl-s", "3")  # long enough to finish on a slow runner
    with httpx.Client(base_url=cluster.url) as client:
        job_id = client.post("/v1/jobs", content=PNG, headers={"content-type": "image/png"}).json()["id"]
        assert wait_state(client, job_id)["state"] == "succeeded"
        deadline = time.monotonic() + 15
        while (gone := client.get(f"/v1/jobs/{job_id}")).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert gone.status_code == 404 and gone.json()["reason"] == "job_not_found"
        assert client.get(f"/v1/jobs/{job_id}/result").status_code == 404


@pytest.mark.parametrize("broker", ["redis", "amqp"])
def test_a_poison_job_fails_after_n_attempts_into_the_dlq(cluster_factory: Any, broker: str) -> None:
    cluster = cluster_factory(broker, "--job-max-attempts", "2")
    with httpx.Client(base_url=cluster.url) as client:
        # No worker serves this model: every attempt fails, on any worker.
        reply = client.post("/v1/jobs?model=no-such-model", content=PNG, headers={"content-type": "image/png"})
        job = wait_state(client, reply.json()["id"])
        assert job["state"] == "failed" and job["attempts"] == 2 and "no-such-model" in job["error"]
        healthy = client.post("/v1/jobs", content=PNG, headers={"content-type": "image/png"}).json()["id"]
        assert wait_state(client, healthy)["state"] == "succeeded"

    async def dead() -> list[str]:
        dlq = open_broker(cluster.broker_url, cluster.namespace)
        await dlq.start()
        try:
            return await dlq.dead_letters()
        finally:
            await dlq.close()

    assert asyncio.run(dead()) == [job["id"]]


def test_bad_requests_get_clear_json_errors(cluster_factory: Any) -> None:
    cluster = cluster_factory("redis")
    with httpx.Client(base_url=cluster.url) as client:
        wrong_type = client.post("/v1/jobs", content=b"hello", headers={"content-type": "text/plain"})
        assert wrong_type.status_code == 415 and "content type" in wrong_type.json()["error"]
        empty = client.post("/v1/jobs", content=b"", headers={"content-type": "image/png"})
        assert empty.status_code == 400 and "empty" in empty.json()["error"]
        assert client.get("/v1/jobs/0123456789abcdef").status_code == 404
        assert client.put("/v1/jobs/0123456789abcdef").status_code == 405
        undecodable = client.post("/v1/jobs", content=b"\x89PNG not really", headers={"content-type": "image/png"})
        job = wait_state(client, undecodable.json()["id"])
        assert job["state"] == "failed" and job["attempts"] == 1  # bad input: no pointless retries


def test_a_broker_url_of_unknown_kind_is_refused_at_start(tmp_path: Path) -> None:
    from depthserve.gateway.app import check_settings
    from depthserve.settings import GatewaySettings

    with pytest.raises(ValueError, match="use redis://"):
        check_settings(GatewaySettings(backends=["127.0.0.1:1"], broker="kafka://127.0.0.1:9092"))


def test_the_gateway_starts_while_the_broker_is_down(tmp_path: Path) -> None:
    require_service(*SERVICES["amqp"])
    require_service(*SERVICES["redis"])
    from depthserve.testing.jobs import AMQP_URL, REDIS_URL
    from depthserve.testing.tcp_proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", 5672)
    proxy.cut()  # RabbitMQ is unreachable when the gateway boots
    namespace = unique_namespace("boot")
    broker = AMQP_URL.replace(":5672/", f":{proxy.port}/")
    worker, address = start_worker(tmp_path, name="sync-only")
    procs = [worker]
    try:
        gateway, url = start_gateway(
            tmp_path, [address], "--broker", broker, "--job-store", REDIS_URL, "--job-namespace", namespace
        )
        procs.append(gateway)
        with httpx.Client(base_url=url) as client:
            assert client.post("/v1/depth", content=PNG, headers={"content-type": "image/png"}).status_code == 200
            refused = client.post("/v1/jobs", content=PNG, headers={"content-type": "image/png"})
            assert refused.status_code == 503 and refused.json()["reason"] == "broker_unavailable"
            assert "error" in refused.json() and "error" in client.get("/v1/cluster").json()["jobs"]
            proxy.restore()
            deadline = time.monotonic() + 20
            while (
                reply := client.post("/v1/jobs", content=PNG, headers={"content-type": "image/png"})
            ).status_code == 503:
                assert time.monotonic() < deadline, reply.json()
                time.sleep(0.2)
            assert reply.status_code == 202
    finally:
        for proc in reversed(procs):
            proc.stop()
        proxy.close()
        asyncio.run(clean_up(AMQP_URL, namespace))
