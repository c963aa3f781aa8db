"""A worker SIGKILLed in the middle of a video: the video completes, every frame exactly once, in order."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import httpx
import pytest

from depthserve.testing.clips import make_clip
from depthserve.testing.processes import start_gateway, start_worker

FRAMES = 120


@pytest.mark.timeout(120)
def test_video_survives_a_worker_killed_mid_stream(tmp_path: Path) -> None:
    workers = [start_worker(tmp_path, "--synthetic-ms", "20", "--warmup-levels", "0", name=f"w{i}") for i in range(2)]
    gateway, url = start_gateway(tmp_path, [address for _, address in workers], "--health-interval-s", "0.5")
    try:
        clip = make_clip(tmp_path / "clip.mp4", FRAMES, fps=30).read_bytes()
        body = bytearray()
        with (
            httpx.Client(http1=False, http2=True, timeout=60) as client,
            client.stream(
                "POST", f"{url}/v1/depth/video", content=clip, headers={"content-type": "video/mp4"}
            ) as reply,
        ):
            assert reply.status_code == 200
            chunks = reply.iter_raw()
            body += next(chunks)  # frames are flowing over both workers
            workers[0][0].kill()
            for chunk in chunks:
                body += chunk
        archive = zipfile.ZipFile(io.BytesIO(bytes(body)))  # complete: central directory and all
        names = archive.namelist()
        assert names == [f"depth_{i:06d}.png" for i in range(FRAMES)] + ["frames.csv"]  # none missing, none twice
        rows = archive.read("frames.csv").decode().splitlines()[1:]
        assert [int(row.split(",")[1]) for row in rows] == list(range(FRAMES))
        assert not workers[0][0].alive() and workers[1][0].alive()
        backends = {b["address"]: b for b in httpx.get(f"{url}/v1/cluster", timeout=10).json()["backends"]}
        assert set(backends) == {workers[0][1], workers[1][1]}
    finally:
        gateway.stop()
        for worker, _ in workers:
            worker.stop()
