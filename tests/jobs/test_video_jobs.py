"""Video jobs with real gateway and synthetic-worker processes: progress, every format, a worker SIGKILLed
mid-job, limits, and (real Redis) the result served by another gateway, or a clear failure when its gateway dies."""

from __future__ import annotations

import asyncio
import io
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from tests.conftest import require_service

from depthserve.jobs.model import Job
from depthserve.jobs.redis_store import RedisJobStore
from depthserve.testing.clips import make_clip
from depthserve.testing.jobs import REDIS_URL, clean_up, unique_namespace
from depthserve.testing.processes import Proc, start_gateway, start_worker

MP4 = {"content-type": "video/mp4"}


def wait_job(url: str, job_id: str, until: Any, timeout: float = 60) -> dict[str, Any]:
    """Poll the job's status until `until(status)`; fail with the last status after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10).json()
        if until(status):
            return status
        assert status["state"] not in ("failed", "cancelled") or until(status), status
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} never got there: {status}")


def cluster_videos(url: str) -> dict[str, Any]:
    return dict(httpx.get(f"{url}/v1/cluster", timeout=10).json()["videos"])


def done(status: dict[str, Any]) -> bool:
    return bool(status["state"] in ("succeeded", "failed"))


def submit(url: str, clip: bytes, query: str = "", **kw: Any) -> dict[str, Any]:
    reply = httpx.post(f"{url}/v1/jobs{query}", content=clip, headers=MP4, timeout=60, **kw)
    assert reply.status_code == 202, reply.text
    return dict(reply.json())


async def stored_job(namespace: str, job_id: str) -> Job:
    """The job's record, read from Redis itself (no gateway is left to ask)."""
    store = RedisJobStore(REDIS_URL, namespace, 60)
    try:
        return await store.get(job_id)
    finally:
        await store.close()


def frames_in_order(data: bytes, frames: int) -> None:
    archive = zipfile.ZipFile(io.BytesIO(data))  # complete: central directory and all
    assert archive.namelist() == [f"depth_{i:06d}.png" for i in range(frames)] + ["frames.csv"]  # none twice
    rows = archive.read("frames.csv").decode().splitlines()[1:]
    assert [int(row.split(",")[1]) for row in rows] == list(range(frames))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two synthetic workers at 20 ms a frame behind a gateway with the in-process broker."""
    logs = tmp_path_factory.mktemp("logs")
    workers = [start_worker(logs, "--synthetic-ms", "20", name=f"w{i}") for i in range(2)]
    config = logs / "gateway.yaml"
    config.write_text("job_max_active_per_caller: 3\n")
    flags = ["--video-max-frames", "100", "--config", str(config)]
    gateway, url = start_gateway(logs, [address for _, address in workers], *flags)
    clips = tmp_path_factory.mktemp("clips")
    yield {"url": url, "clips": clips, "clip": make_clip(clips / "c.mp4", 30).read_bytes()}
    gateway.stop()
    for worker, _ in workers:
        worker.stop()


def test_a_video_job_shows_progress_and_its_zip_equals_the_synchronous_reply(cluster: dict[str, Any]) -> None:
    url = cluster["url"]
    accepted = submit(url, cluster["clip"])
    status = wait_job(url, accepted["id"], done)
    assert status["state"] == "succeeded" and status["kind"] == "video", status
    assert status["progress"]["frames_done"] == status["progress"]["frames_total"] == 30
    assert status["progress"]["fps"] > 0 and status["content_type"] == "application/zip"
    result = httpx.get(f"{url}{status['result_url']}", timeout=60)
    assert result.status_code == 200 and int(result.headers["content-length"]) == len(result.content)
    frames_in_order(result.content, 30)
    direct = httpx.post(f"{url}/v1/depth/video", content=cluster["clip"], headers=MP4, timeout=60)
    job_zip, direct_zip = zipfile.ZipFile(io.BytesIO(result.content)), zipfile.ZipFile(io.BytesIO(direct.content))
    assert all(job_zip.read(name) == direct_zip.read(name) for name in direct_zip.namelist())


def test_multipart_npz_with_stride_and_frames_total_known_at_submission(cluster: dict[str, Any]) -> None:
    url = cluster["url"]
    files = {"video": ("c.mp4", cluster["clip"], "video/mp4"), "intrinsics": (None, "50,50,32,24")}
    reply = httpx.post(f"{url}/v1/jobs?format=npz&stride=2&max_frames=10", files=files, timeout=60)
    assert reply.status_code == 202, reply.text
    first = httpx.get(f"{url}/v1/jobs/{reply.json()['id']}", timeout=10).json()
    assert first["progress"]["frames_total"] == 10
    status = wait_job(url, first["id"], done)
    assert status["state"] == "succeeded" and status["content_type"] == "application/x-npz"
    npz = np.load(io.BytesIO(httpx.get(f"{url}{status['result_url']}", timeout=60).content))
    assert npz["depth"].shape == (10, 48, 64)
    np.testing.assert_array_equal(npz["frames"], np.arange(0, 20, 2))


def test_bad_videos_and_options_are_refused_at_submission(cluster: dict[str, Any]) -> None:
    url, clips = cluster["url"], cluster["clips"]
    cases = [
        (cluster["clip"][: len(cluster["clip"]) // 2], "", 400, "corrupt_video"),
        (make_clip(clips / "x.mkv", 5, codec="ffv1").read_bytes(), "", 415, "unsupported_codec"),
        (make_clip(clips / "long.mp4", 120).read_bytes(), "", 413, "too_many_frames"),
        (cluster["clip"], "?format=gif", 406, "unsupported_format"),
        (cluster["clip"], "?stride=0", 400, "invalid_request"),
    ]
    for body, query, code, reason in cases:
        reply = httpx.post(f"{url}/v1/jobs{query}", content=body, headers=MP4, timeout=60)
        assert (reply.status_code, reply.json()["reason"]) == (code, reason), reply.text
    assert httpx.get(f"{url}/v1/jobs", timeout=10).status_code in (404, 405)  # no listing: nothing to leak


def test_the_callers_job_limit_applies_to_video_jobs(cluster: dict[str, Any]) -> None:
    url = cluster["url"]
    clip = make_clip(cluster["clips"] / "ninety.mp4", 90).read_bytes()
    accepted = [submit(url, clip) for _ in range(3)]  # the caller's limit is 3 queued or running
    refused = httpx.post(f"{url}/v1/jobs", content=clip, headers=MP4, timeout=60)
    assert refused.status_code == 429 and refused.json()["reason"] == "job_quota"
    for job in accepted:
        assert wait_job(url, job["id"], done)["state"] == "succeeded"
    deadline = time.monotonic() + 30
    while (videos := cluster_videos(url))["jobs"] and time.monotonic() < deadline:
        time.sleep(0.05)  # a job's task removes its upload just after storing its result
    assert videos["jobs"] == 0 and videos["disk_mib"] == 0  # every upload removed with its job


@pytest.mark.timeout(120)
def test_a_worker_sigkilled_mid_job_costs_no_frame(tmp_path: Path) -> None:
    workers = [start_worker(tmp_path, "--synthetic-ms", "40", name=f"w{i}") for i in range(2)]
    gateway, url = start_gateway(tmp_path, [address for _, address in workers], "--health-interval-s", "0.5")
    try:
        frames = 160
        job = submit(url, make_clip(tmp_path / "clip.mp4", frames).read_bytes())
        wait_job(url, job["id"], lambda s: s["state"] == "running" and s["progress"]["frames_done"] > 0)
        workers[0][0].kill()  # mid-job: frames are at both workers
        status = wait_job(url, job["id"], done)
        assert status["state"] == "succeeded", status
        frames_in_order(httpx.get(f"{url}{status['result_url']}", timeout=60).content, frames)
        assert not workers[0][0].alive() and workers[1][0].alive()
    finally:
        gateway.stop()
        for worker, _ in workers:
            worker.stop()


@pytest.mark.timeout(120)
def test_redis_any_gateway_serves_the_result_and_a_dead_gateways_job_fails_clearly(tmp_path: Path) -> None:
    require_service("Redis", "127.0.0.1", 6379)
    namespace = unique_namespace("video-jobs")
    flags = ["--broker", REDIS_URL, "--job-namespace", namespace, "--job-visibility-timeout-s", "2"]
    worker, address = start_worker(tmp_path, "--synthetic-ms", "40")  # frames come from the gateways, not a broker
    procs: list[Proc] = [worker]
    try:
        runner, runner_url = start_gateway(tmp_path, [address], *flags)
        other, other_url = start_gateway(tmp_path, [address], *flags)
        procs += [runner, other]
        short = submit(runner_url, make_clip(tmp_path / "short.mp4", 20).read_bytes())
        status = wait_job(other_url, short["id"], done)
        assert status["state"] == "succeeded", status
        frames_in_order(httpx.get(f"{other_url}{status['result_url']}", timeout=60).content, 20)  # from Redis

        long = submit(runner_url, make_clip(tmp_path / "long.mp4", 200).read_bytes())
        seen = wait_job(other_url, long["id"], lambda s: s["state"] == "running" and s["progress"]["frames_done"])
        runner.kill()  # SIGKILL: the video on its disk is gone with it
        failed = wait_job(other_url, long["id"], done)
        assert failed["state"] == "failed" and "submit the video again" in failed["error"], failed
        assert failed["progress"]["frames_done"] >= seen["progress"]["frames_done"]
        result = httpx.get(f"{other_url}/v1/jobs/{long['id']}/result", timeout=10)
        assert result.status_code == 409  # never a part of the result presented as the whole

        stopped = submit(other_url, make_clip(tmp_path / "long.mp4", 200).read_bytes())
        wait_job(other_url, stopped["id"], lambda s: s["state"] == "running")
        assert other.stop() == 0  # SIGTERM: it fails the jobs it holds, saying so, before it exits
        job = asyncio.run(stored_job(namespace, stopped["id"]))
        assert job.state == "failed" and "stopped before it finished" in (job.error or ""), job
    finally:
        for proc in reversed(procs):
            proc.stop()
        asyncio.run(clean_up(REDIS_URL, namespace))
