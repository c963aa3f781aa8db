"""The client commands a person types: `depthserve predict` writes each format, `status` shows backends."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from depthserve.testing.processes import start_gateway, start_worker
from depthserve.testing.samples import png_bytes


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("logs")
    worker, address = start_worker(logs)
    gateway, url = start_gateway(logs, [address])
    yield url
    gateway.stop()
    worker.stop()


def depthserve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "depthserve", *args], capture_output=True, text=True, timeout=60)


def test_predict_writes_every_format(
    gateway_url: str, rgb_png: bytes, raw_depth_mm: np.ndarray, tmp_path: Path
) -> None:
    image = tmp_path / "photo.png"
    image.write_bytes(rgb_png)
    raw = tmp_path / "raw.png"
    raw.write_bytes(png_bytes(raw_depth_mm))
    for name, extra in [
        ("d.npy", []),
        ("d.png", ["--depth", str(raw)]),
        ("p.png", ["--preview"]),
        ("c.ply", ["--intrinsics", "50,50,32,24"]),
    ]:
        done = depthserve("predict", str(image), "-o", str(tmp_path / name), "--url", gateway_url, *extra)
        assert done.returncode == 0, done.stderr
        assert f"wrote {tmp_path / name}" in done.stdout
    assert np.load(tmp_path / "d.npy").shape == (48, 64)
    assert Image.open(tmp_path / "d.png").mode in ("I;16", "I")
    assert Image.open(tmp_path / "p.png").mode == "RGB"
    assert (tmp_path / "c.ply").read_bytes().startswith(b"ply\n")


def test_predict_reports_errors_clearly(gateway_url: str, rgb_png: bytes, tmp_path: Path) -> None:
    image = tmp_path / "photo.png"
    image.write_bytes(rgb_png)
    no_k = depthserve("predict", str(image), "-o", str(tmp_path / "c.ply"), "--url", gateway_url)
    assert no_k.returncode == 1 and "error 400" in no_k.stderr and "intrinsics" in no_k.stderr
    bad_ext = depthserve("predict", str(image), "-o", str(tmp_path / "d.txt"), "--url", gateway_url)
    assert bad_ext.returncode == 2 and ".npy, .png or .ply" in bad_ext.stderr
    down = depthserve("predict", str(image), "-o", str(tmp_path / "d.npy"), "--url", "http://127.0.0.1:9")
    assert down.returncode == 1 and "cannot reach" in down.stderr


def test_status_shows_each_backend(gateway_url: str) -> None:
    done = depthserve("status", "--url", gateway_url)
    assert done.returncode == 0, done.stderr
    assert "ready" in done.stdout and "round_robin" in done.stdout and "127.0.0.1:" in done.stdout
    assert "weight" in done.stdout and "queue+run" in done.stdout and "any" in done.stdout  # untagged: any model
    down = depthserve("status", "--url", "http://127.0.0.1:9")
    assert down.returncode == 1 and "cannot read" in down.stdout


def test_gateway_without_backends_refuses_to_start() -> None:
    done = depthserve("gateway", "--port", "0")
    assert done.returncode == 2 and "--backends" in done.stderr


def test_new_key_prints_a_key_and_its_hashed_line() -> None:
    from depthserve.gateway.api_keys import hash_key

    done = depthserve("new-key", "carol")
    assert done.returncode == 0
    key = done.stdout.split("key:")[1].split()[0]
    line = done.stdout.split("line:")[1].split()[0]
    assert line == f"carol:{hash_key(key)}" and key not in line
