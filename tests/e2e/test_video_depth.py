"""A real model behind the video route: every frame's depth is what /v1/depth gives for that frame alone."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from depthserve.testing.clips import decoded_frames, make_clip
from depthserve.testing.processes import start_gateway, start_worker
from depthserve.testing.samples import png_bytes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two tiny-model workers behind one gateway, so frames really fan out over both."""
    logs = tmp_path_factory.mktemp("logs")
    workers = [start_worker(logs, "--model", "tiny", "--threads", "1", name=f"tiny{i}") for i in range(2)]
    try:
        gateway, url = start_gateway(logs, [address for _, address in workers])
    except BaseException:
        for worker, _ in workers:
            worker.stop()
        raise
    yield {"url": url, "clips": tmp_path_factory.mktemp("clips")}
    gateway.stop()
    for worker, _ in workers:
        worker.stop()


def alone(client: httpx.Client, url: str, frame: np.ndarray, query: str = "") -> bytes:
    reply = client.post(f"{url}/v1/depth{query}", content=png_bytes(frame), headers={"content-type": "image/png"})
    assert reply.status_code == 200, reply.text
    return reply.content


def test_each_frame_equals_its_own_v1_depth_result(cluster: dict[str, Any]) -> None:
    path: Path = make_clip(cluster["clips"] / "scene.mp4", 10)  # lossy H.264: compare with what decodes
    frames = decoded_frames(path)
    url = cluster["url"]
    with httpx.Client(http1=False, http2=True, timeout=120) as client:
        reply = client.post(
            f"{url}/v1/depth/video?format=npz&dtype=float32",
            content=path.read_bytes(),
            headers={"content-type": "video/mp4"},
        )
        assert reply.status_code == 200, reply.text
        stack = np.load(io.BytesIO(reply.content))["depth"]
        assert stack.shape == (10, 48, 64)
        for index, frame in enumerate(frames):
            expected = np.load(io.BytesIO(alone(client, url, frame)))
            np.testing.assert_allclose(stack[index], expected, atol=1e-5, rtol=0, err_msg=f"frame {index}")
        assert np.abs(np.diff(stack, axis=0)).max() > 0  # frames differ, so the order is really checked
        zipped = client.post(
            f"{url}/v1/depth/video?stride=4", content=path.read_bytes(), headers={"content-type": "video/mp4"}
        )
        archive = zipfile.ZipFile(io.BytesIO(zipped.content))
        for position, source in enumerate((0, 4, 8)):
            png = np.asarray(Image.open(io.BytesIO(archive.read(f"depth_{position:06d}.png"))))
            own = np.asarray(Image.open(io.BytesIO(alone(client, url, frames[source], "?format=png16"))))
            np.testing.assert_array_equal(png, own)
