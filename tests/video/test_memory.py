"""A 3,000-frame video streams through the gateway without its memory growing with the video."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from depthserve.testing.clips import make_clip
from depthserve.testing.memory import peak_rss_mb
from depthserve.testing.processes import start_gateway, start_worker

FRAMES = 3000
GROWTH_BOUND_MB = 40.0  # the whole float32 reply would be 70 MiB, the decoded frames 53 MiB


@pytest.mark.timeout(180)
def test_peak_rss_of_a_3000_frame_video_does_not_grow_with_it(tmp_path: Path) -> None:
    workers = [start_worker(tmp_path, name=f"w{i}") for i in range(2)]
    gateway, url = start_gateway(tmp_path, [address for _, address in workers])
    try:
        query = "?format=npz&dtype=float32"
        headers = {"content-type": "video/mp4"}
        warm = make_clip(tmp_path / "warm.mp4", 60, 96, 64).read_bytes()
        long = make_clip(tmp_path / "long.mp4", FRAMES, 96, 64, fps=30).read_bytes()
        with httpx.Client(http1=False, http2=True, timeout=120) as client:
            assert client.post(f"{url}/v1/depth/video{query}", content=warm, headers=headers).status_code == 200
            before = peak_rss_mb(gateway.pid)
            received = 0
            with client.stream("POST", f"{url}/v1/depth/video{query}", content=long, headers=headers) as reply:
                assert reply.status_code == 200 and reply.headers["x-video-frames"] == str(FRAMES)
                for chunk in reply.iter_raw():
                    received += len(chunk)  # read and dropped: the client holds none of it either
        assert received > FRAMES * 96 * 64 * 4
        growth = peak_rss_mb(gateway.pid) - before
        assert growth < GROWTH_BOUND_MB, f"gateway peak RSS grew {growth:.1f} MiB over a {FRAMES}-frame video"
    finally:
        gateway.stop()
        for worker, _ in workers:
            worker.stop()
