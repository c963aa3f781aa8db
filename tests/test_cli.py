"""The client commands a person types: `depthserve predict` writes each format, `status` shows backends."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import httpx
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
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}  # a pipe of no set width: the whole table
    return subprocess.run(
        [sys.executable, "-m", "depthserve", *args], capture_output=True, text=True, timeout=60, env=env
    )


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
    from depthserve.gateway.edge.api_keys import hash_key

    done = depthserve("new-key", "carol")
    assert done.returncode == 0
    key = done.stdout.split("key:")[1].split()[0]
    line = done.stdout.split("line:")[1].split()[0]
    assert line == f"carol:{hash_key(key)}" and key not in line


def on_terminal(args: list[str], columns: int) -> str:
    """Run `depthserve ARGS` on a pseudo-terminal `columns` wide, as a person would; give what it showed."""
    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    with subprocess.Popen(
        [sys.executable, "-m", "depthserve", *args], stdin=side, stdout=side, stderr=side, env=env
    ) as process:
        os.close(side)
        shown = b""
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal closed when the process ended
                break
            if not chunk:
                break
            shown += chunk
        assert process.wait(60) == 0, shown.decode(errors="replace")
    os.close(main)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode())


@pytest.mark.parametrize("columns", [80, 100])
def test_status_fits_a_narrow_terminal_with_whole_cells(gateway_url: str, columns: int) -> None:
    shown = on_terminal(["status", "--url", gateway_url], columns)
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= columns, shown
    assert "…" not in shown, shown
    cluster = httpx.get(f"{gateway_url}/v1/cluster").json()
    for backend in cluster["backends"]:  # every cell whole, each on its line: address, state, counts
        row = next(line for line in lines if backend["address"] in line)
        assert backend["state"] in row and f" {backend['served']} " in f" {row} ", shown


def test_status_shows_every_column_on_a_wide_terminal(gateway_url: str) -> None:
    shown = on_terminal(["status", "--url", gateway_url], 200)
    assert "model:version" in shown and "peak ms" in shown and "report age" in shown and "…" not in shown, shown


def test_version() -> None:
    from depthserve import __version__

    done = depthserve("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"depthserve {__version__}", done


@pytest.mark.parametrize("command", [[], ["predict"], ["gateway"], ["status"], ["drain"]])
def test_help_shows_flags_without_a_value(command: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "depthserve", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0 and "--help" in done.stdout, done.stderr
    assert "<bool>" not in done.stdout, done.stdout


def test_predict_writes_a_video_as_zip_npz_and_mp4(gateway_url: str, tmp_path: Path) -> None:
    import av

    from depthserve.testing.clips import make_clip

    clip = make_clip(tmp_path / "clip.mp4", 20)
    for name in ("d.zip", "d.npz", "d.mp4"):
        done = depthserve("predict", str(clip), "-o", str(tmp_path / name), "--url", gateway_url, "--stride", "2")
        assert done.returncode == 0, done.stderr
        assert f"wrote {tmp_path / name} (10 frames" in done.stdout
        assert "10/10" in done.stdout + done.stderr  # the progress bar reached the total
    assert np.load(tmp_path / "d.npz")["depth"].shape == (10, 48, 64)
    with av.open(str(tmp_path / "d.mp4")) as container:
        assert sum(1 for _ in container.decode(video=0)) == 10
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(clip.read_bytes()[:300])
    done = depthserve("predict", str(broken), "-o", str(tmp_path / "b.zip"), "--url", gateway_url)
    assert done.returncode == 1 and "error 400" in done.stderr and not (tmp_path / "b.zip").exists()
