"""The whole path on loopback: real gateway and tiny-model worker processes, real HTTP/2 clients."""

from __future__ import annotations

import glob
import io
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from depthserve.model import predict
from depthserve.testing.processes import start_gateway, start_worker
from depthserve.testing.samples import png_bytes

INTRINSICS = "50,50,32,24"  # fx, fy, cx, cy in pixels for the 64x48 sample


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One tiny-model worker behind one gateway (1 MiB body limit, to test the limit cheaply)."""
    logs = tmp_path_factory.mktemp("logs")
    worker, address = start_worker(logs, "--model", "tiny", "--threads", "1")
    try:
        gateway, url = start_gateway(logs, [address], "--max-body-mb", "1")
    except BaseException:
        worker.stop()
        raise
    yield {"url": url, "worker": worker, "gateway": gateway}
    gateway.stop()
    worker.stop()


def reference(model: Any, rgb: np.ndarray, depth_mm: np.ndarray | None = None, with_k: bool = False) -> Any:
    """Run the tiny model in this process on exactly what the worker decodes."""
    depth = None if depth_mm is None else depth_mm.astype(np.float32) / 1000.0
    k = np.array([[50, 0, 32], [0, 50, 24], [0, 0, 1]], dtype=np.float32) if with_k else None
    return predict(model, rgb, depth=depth, intrinsics=k)


def test_curl_http2_prior_knowledge_matches_local_model(
    cluster: dict[str, Any], rgb: np.ndarray, rgb_png: bytes, tiny_model: Any, tmp_path: Path
) -> None:
    (tmp_path / "in.png").write_bytes(rgb_png)
    out = tmp_path / "out.npy"
    result = subprocess.run(
        [
            "curl",
            "-sS",
            "--http2-prior-knowledge",
            "-H",
            "Content-Type: image/png",
            "--data-binary",
            f"@{tmp_path / 'in.png'}",
            f"{cluster['url']}/v1/depth",
            "-o",
            str(out),
            "-w",
            "%{http_code} %{http_version}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout == "200 2"
    np.testing.assert_allclose(np.load(out), reference(tiny_model, rgb)["depth"], atol=1e-5, rtol=0)


def test_httpx_http2_multipart_with_depth_and_intrinsics(
    cluster: dict[str, Any], rgb: np.ndarray, rgb_png: bytes, raw_depth_mm: np.ndarray, tiny_model: Any
) -> None:
    files = {"image": ("in.png", rgb_png, "image/png"), "depth": ("d.png", png_bytes(raw_depth_mm), "image/png")}
    with httpx.Client(http1=False, http2=True, timeout=60) as client:
        reply = client.post(
            f"{cluster['url']}/v1/depth",
            files=files,
            data={"intrinsics": INTRINSICS},
            headers={"X-Request-Id": "abc123"},
        )
    assert reply.status_code == 200, reply.text
    assert reply.http_version == "HTTP/2"
    assert reply.headers["x-request-id"] == "abc123"
    expected = reference(tiny_model, rgb, raw_depth_mm, with_k=True)["depth"]
    np.testing.assert_allclose(np.load(io.BytesIO(reply.content)), expected, atol=1e-5, rtol=0)
    monocular = reference(tiny_model, rgb)["depth"]
    assert not np.allclose(expected, monocular, atol=1e-4)  # the depth input really reached the model


def test_http11_works(cluster: dict[str, Any], rgb: np.ndarray, rgb_png: bytes, tiny_model: Any) -> None:
    with httpx.Client(http1=True, http2=False, timeout=60) as client:
        reply = client.post(f"{cluster['url']}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"})
    assert reply.status_code == 200 and reply.http_version == "HTTP/1.1"
    np.testing.assert_allclose(np.load(io.BytesIO(reply.content)), reference(tiny_model, rgb)["depth"], atol=1e-5)


def test_every_output_format_decodes(cluster: dict[str, Any], rgb: np.ndarray, rgb_png: bytes, tiny_model: Any) -> None:
    ref = reference(tiny_model, rgb, with_k=True)
    with httpx.Client(http2=True, http1=False, timeout=60) as client:

        def ask(fmt: str | None, accept: str | None = None) -> httpx.Response:
            params = {"format": fmt} if fmt else {}
            headers = {"Accept": accept} if accept else {}
            reply = client.post(
                f"{cluster['url']}/v1/depth",
                params=params,
                headers=headers,
                files={"image": ("in.png", rgb_png, "image/png")},
                data={"intrinsics": INTRINSICS},
            )
            assert reply.status_code == 200, reply.text
            return reply

        png16 = ask(None, "image/png")
        assert png16.headers["content-type"] == "image/png"
        mm = np.asarray(Image.open(io.BytesIO(png16.content))).astype(np.float64)
        valid = np.isfinite(ref["depth"]) & ref["mask"] & (ref["depth"] > 0)
        assert np.abs(mm[valid] / 1000.0 - ref["depth"][valid]).max() <= 0.001
        assert (mm[~valid] == 0).all()

        preview = Image.open(io.BytesIO(ask("preview").content))
        assert preview.mode == "RGB" and preview.size == (64, 48)
        assert Image.open(io.BytesIO(ask(None, "image/png;preview").content)).mode == "RGB"

        ply = ask("ply").content
        header, _, body = ply.partition(b"end_header\n")
        count = int(next(line for line in header.split(b"\n") if line.startswith(b"element vertex")).split()[-1])
        expected_points = int(np.isfinite(ref["points"]).all(axis=-1).sum())
        assert count == expected_points > 0
        assert len(body) == count * (3 * 4 + 3)  # float x,y,z + uchar r,g,b

        npy = np.load(io.BytesIO(ask("npy").content))
        np.testing.assert_allclose(npy, ref["depth"], atol=1e-5)


@pytest.mark.parametrize(
    ("body", "content_type", "query", "status", "reason"),
    [
        (b"", "image/png", "", 400, "invalid_request"),
        (b"not an image at all", "image/png", "", 400, "invalid_request"),
        (b"hello", "text/plain", "", 415, "unsupported_media_type"),
        (b"x" * (2 * 1024 * 1024), "image/png", "", 413, "body_too_large"),
        ("RGB", "image/png", "?resolution_level=12", 400, "invalid_request"),
        ("RGB", "image/png", "?resolution_level=abc", 400, "invalid_request"),
        ("RGB", "image/png", "?resolution_level=%C2%B2", 400, "invalid_request"),
        ("RGB", "image/png", "?format=ply", 400, "invalid_request"),
        ("RGB", "image/png", "?format=gif", 406, "unsupported_format"),
        ("RGB", "image/png", "?model=nope", 404, "unknown_model"),
    ],
)
def test_bad_input_gets_clear_4xx_and_everything_stays_healthy(
    cluster: dict[str, Any],
    rgb_png: bytes,
    body: bytes | str,
    content_type: str,
    query: str,
    status: int,
    reason: str,
) -> None:
    payload = rgb_png if body == "RGB" else body
    assert isinstance(payload, bytes)
    with httpx.Client(http2=True, http1=False, timeout=60) as client:
        reply = client.post(
            f"{cluster['url']}/v1/depth{query}", content=payload, headers={"Content-Type": content_type}
        )
        assert reply.status_code == status, reply.text
        error = reply.json()
        assert error["reason"] == reason and error["error"]
        assert client.get(f"{cluster['url']}/healthz").status_code == 200
        good = client.post(f"{cluster['url']}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"})
        assert good.status_code == 200
    assert cluster["worker"].alive() and cluster["gateway"].alive()


def test_depth_size_mismatch_is_refused(cluster: dict[str, Any], rgb_png: bytes) -> None:
    wrong = png_bytes(np.full((10, 10), 1000, dtype=np.uint16))
    files = {"image": ("in.png", rgb_png, "image/png"), "depth": ("d.png", wrong, "image/png")}
    reply = httpx.post(f"{cluster['url']}/v1/depth", files=files, timeout=60)
    assert reply.status_code == 400
    assert "10" in reply.json()["error"] and "48" in reply.json()["error"]


def test_cluster_view_counts_requests_and_shows_load(cluster: dict[str, Any], rgb_png: bytes) -> None:
    before = httpx.get(f"{cluster['url']}/v1/cluster").json()["backends"][0]["served"]
    httpx.post(f"{cluster['url']}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=60)
    view = httpx.get(f"{cluster['url']}/v1/cluster").json()
    assert view["policy"] == "round_robin"
    backend = view["backends"][0]
    assert backend["state"] == "ready" and backend["served"] == before + 1
    assert backend["weight"] == 1.0 and backend["weight_mode"] == "static"
    assert backend["ewma_ms"] > 0 and backend["peak_ewma_ms"] >= backend["ewma_ms"] * 0.5
    load = backend["load"]
    assert backend["load_stale"] is False and load["max_batch"] == 1
    assert load["capacity_rps"] > 0 and 0 < load["mem_used"] < load["mem_total"]  # CPU: RSS of physical
    # Named for what they hold: a CPU worker's memory is not "gpu" memory, and no sensor is not 0 degrees.
    assert load["device"] == "cpu" and not any(key.startswith(("gpu_mem", "gpu_temp")) for key in load)
    sensor = bool(glob.glob("/sys/class/thermal/thermal_zone*/temp"))
    assert (load["temp_c"] is not None) == sensor


def test_unsafe_request_id_is_replaced_not_forwarded(cluster: dict[str, Any], rgb_png: bytes) -> None:
    reply = httpx.post(
        f"{cluster['url']}/v1/depth",
        content=rgb_png,
        timeout=60,
        headers={"Content-Type": "image/png", "X-Request-Id": "bad\tid"},
    )
    assert reply.status_code == 200 and reply.headers["x-request-id"] != "bad\tid"
    assert httpx.get(f"{cluster['url']}/v1/cluster").json()["backends"][0]["in_flight"] == 0
