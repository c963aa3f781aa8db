"""Replies too large for a gRPC message get 413 at once, never "503 overloaded" and never a retry elsewhere."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from depthserve.testing.processes import start_gateway, start_worker
from depthserve.testing.samples import png_bytes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two synthetic workers (64 MiB messages) behind a gateway with the same limit and one with 128 MiB."""
    logs = tmp_path_factory.mktemp("logs")
    started: list[Any] = []
    backends: list[str] = []
    try:
        for _ in range(2):
            worker, address = start_worker(logs)
            started.append(worker)
            backends.append(address)
        same, same_url = start_gateway(logs, backends)
        started.append(same)
        with pytest.MonkeyPatch.context() as env:  # no flag for it: the environment sets it
            env.setenv("DEPTHSERVE_GATEWAY_MAX_MESSAGE_MB", "128")
            larger, larger_url = start_gateway(logs, backends)
        started.append(larger)
        yield {"same": same_url, "larger": larger_url, "procs": started}
    finally:
        for proc in reversed(started):
            proc.stop()


@pytest.fixture(scope="module")
def image_17mp() -> bytes:
    """A 4800x3600 PNG (17.3 MP, tens of KB): as .npy its reply is 66 MiB."""
    return png_bytes(np.zeros((3600, 4800, 3), np.uint8))


def retries(client: httpx.Client, url: str) -> float:
    found = re.search(r"^depthserve_gateway_retries_total (\S+)$", client.get(f"{url}/metrics").text, re.M)
    assert found is not None
    return float(found.group(1))


def post(client: httpx.Client, url: str, image: bytes, fmt: str) -> httpx.Response:
    return client.post(f"{url}/v1/depth?format={fmt}", content=image, headers={"Content-Type": "image/png"})


@pytest.mark.parametrize("gateway", ["same", "larger"])
def test_npy_over_16_7_megapixels_is_413_at_once_and_never_retried(
    cluster: dict[str, Any], image_17mp: bytes, rgb_png: bytes, gateway: str
) -> None:
    """`same` refuses from the header before forwarding; `larger` forwards and the worker refuses before running."""
    url = cluster[gateway]
    sent = answered = refused = 0
    with httpx.Client(http2=True, http1=False, timeout=60) as client:
        before = retries(client, url)
        for _ in range(3):
            sent += 1
            reply = post(client, url, image_17mp, "npy")
            assert reply.status_code == 413, reply.text
            assert "retry-after" not in reply.headers
            error = reply.json()
            assert error["reason"] == "reply_too_large"
            assert "64 MiB limit" in error["error"] and "4800x3600" in error["error"]
            refused += 1
        assert retries(client, url) == before  # no other worker was asked
        sent += 1
        assert post(client, url, rgb_png, "npy").status_code == 200
        answered += 1
    assert (sent, answered, refused) == (4, 1, 3)
    assert all(proc.alive() for proc in cluster["procs"])


def test_the_same_image_as_compressed_png16_is_served(cluster: dict[str, Any], image_17mp: bytes) -> None:
    with httpx.Client(http2=True, http1=False, timeout=120) as client:
        reply = post(client, cluster["same"], image_17mp, "png16")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "image/png" and len(reply.content) < 64 * 1024 * 1024


def test_the_largest_npy_that_fits_is_served_and_one_more_row_is_not(cluster: dict[str, Any]) -> None:
    """(64 MiB - 64 KiB of headroom) / 4 bytes = 4096 x 4092 pixels exactly."""
    with httpx.Client(http2=True, http1=False, timeout=120) as client:
        fits = post(client, cluster["same"], png_bytes(np.zeros((4092, 4096, 3), np.uint8)), "npy")
        assert fits.status_code == 200, fits.text
        assert np.load(io.BytesIO(fits.content)).shape == (4092, 4096)
        over = post(client, cluster["same"], png_bytes(np.zeros((4093, 4096, 3), np.uint8)), "npy")
        assert over.status_code == 413 and over.json()["reason"] == "reply_too_large"
