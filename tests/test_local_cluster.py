"""`depthserve up` as a user runs it: starts, serves a request, and leaves no process behind on SIGTERM."""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc

from depthserve import local_cluster
from depthserve.local_cluster import LocalCluster
from depthserve.probes import free_port
from depthserve.testing.processes import descendants, pid_alive


def test_up_serves_and_stops_without_orphans(rgb_png: bytes) -> None:
    port, grpc_port = free_port(), free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "depthserve", "up", "--workers", "2", "--port", str(port)]
        + ["--grpc-port", str(grpc_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert up.stdout is not None
        line = up.stdout.readline()  # blocks until the cluster is ready (or up exits)
        assert line.strip() == f"depthserve ready at http://127.0.0.1:{port}", line or (
            up.stderr.read() if up.stderr else ""
        )
        family = descendants(up.pid)
        assert len(family) >= 3  # two workers and a gateway (plus granian's worker process)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=60
        )
        assert reply.status_code == 200
        assert np.load(io.BytesIO(reply.content)).shape == (48, 64)
        cluster = httpx.get(f"http://127.0.0.1:{port}/v1/cluster").json()
        assert [b["state"] for b in cluster["backends"]] == ["ready", "ready"]
        oip = tritonclient.grpc.InferenceServerClient(f"127.0.0.1:{grpc_port}")  # --grpc-port reaches the gateway
        assert oip.is_server_ready() and oip.is_model_ready("lingbot-depth")

        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
        stderr = up.stderr.read() if up.stderr else ""
        assert "Traceback" not in stderr
        deadline = time.monotonic() + 10
        while any(pid_alive(pid) for pid in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in family if pid_alive(pid)], "processes left running after depthserve up stopped"
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode()


def test_up_restarts_a_worker_that_dies(rgb_png: bytes) -> None:
    port = free_port()
    up = subprocess.Popen(
        [sys.executable, "-m", "depthserve", "up", "--workers", "2", "--port", str(port), "--model", "synthetic"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert up.stdout is not None and up.stdout.readline().startswith("depthserve ready")
        workers = [pid for pid in descendants(up.pid) if " worker " in _cmdline(pid)]
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while True:  # the gateway first sees it gone, then back after restart and warm-up
            states = [b["state"] for b in httpx.get(f"{url}/v1/cluster").json()["backends"]]
            fresh = [pid for pid in descendants(up.pid) if " worker " in _cmdline(pid) and pid != workers[0]]
            if states == ["ready", "ready"] and len(fresh) == 2 and not pid_alive(workers[0]):
                break
            assert time.monotonic() < deadline, f"worker not restarted: {states}"
            time.sleep(0.2)
        reply = httpx.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=30)
        assert reply.status_code == 200
        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
        assert "restarting in 1s" in (up.stderr.read() if up.stderr else "")
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)


def test_up_banner_is_unwrapped_and_log_folders_do_not_pile_up(tmp_path: Path) -> None:
    temp = tmp_path / "temp"  # the temp dir `up` keeps its log folders in
    temp.mkdir()
    for index in range(8):  # earlier runs' folders, oldest first
        old = temp / f"depthserve-up-old{index}"
        old.mkdir()
        (old / "gateway.log").write_text("an earlier run\n")
        os.utime(old, (1_000_000 + index, 1_000_000 + index))
    running = temp / "depthserve-up-running"  # another `up`, still alive: its logs are in use
    running.mkdir()
    (running / "up.pid").write_text(str(os.getpid()))
    os.utime(running, (1, 1))
    port = free_port()
    stderr_log = tmp_path / "up.stderr"
    env = {**os.environ, "TMPDIR": str(temp), "COLUMNS": "80"}  # logged, 80 columns wide
    with stderr_log.open("w") as stderr:
        up = subprocess.Popen(
            [sys.executable, "-m", "depthserve", "up", "--workers", "1", "--port", str(port), "--model", "synthetic"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
            env=env,
            cwd=tmp_path,  # a folder of the user's: the banner's paths must work from there
        )
    try:
        assert up.stdout is not None and up.stdout.readline().startswith("depthserve ready"), stderr_log.read_text()
        deadline = time.monotonic() + 30
        while "Ctrl-C" not in stderr_log.read_text() and time.monotonic() < deadline:  # the banner's last line
            time.sleep(0.1)
        banner = stderr_log.read_text().split("\nTry it", 1)[1].splitlines()
        curl = next(line.strip() for line in banner if line.startswith("  curl"))
        assert curl.endswith(f"http://127.0.0.1:{port}/v1/depth -o depth.npy"), banner  # whole, on one line
        assert any(line.strip().endswith(f"status --url http://127.0.0.1:{port}") for line in banner), banner
        done = subprocess.run(["bash", "-c", curl], cwd=tmp_path, capture_output=True, timeout=60)  # pasted as is
        assert done.returncode == 0 and np.load(tmp_path / "depth.npy").ndim == 2, done.stderr
        log_dir = Path(next(line for line in banner if line.startswith("Logs: ")).split()[1])
        assert log_dir.parent == temp and (log_dir / "gateway.log").exists()
        up.send_signal(signal.SIGTERM)
        assert up.wait(30) == 0
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
    left = sorted(folder.name for folder in temp.iterdir())
    assert running.exists() and log_dir.exists(), left  # in use, and this run's logs stay after it
    finished = [name for name in left if name != running.name]
    assert len(finished) == 5 and "depthserve-up-old7" in finished and "depthserve-up-old3" not in finished, left


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        entries = [entry.decode().partition("=") for entry in f.read().split(b"\0") if entry]
    return {key: value for key, _, value in entries}


def test_gpus_start_one_worker_per_gpu_each_seeing_only_its_own() -> None:
    # Synthetic workers ignore the device, so the launch itself is checked on a machine without GPUs.
    cluster = LocalCluster(
        workers=5, model="synthetic", checkpoint=None, port=0, policy="round_robin", threads=None,
        gpu_ids=["3", "GPU-5b3c7a52-1111-2222-3333-444455556666"],
    )  # fmt: skip
    try:
        assert cluster.start()
        workers = [child for child in cluster.children if child.name.startswith("worker")]
        assert [child.name for child in workers] == ["worker-0", "worker-1"]
        seen = [_environ(child.process.pid)["CUDA_VISIBLE_DEVICES"] for child in workers]
        assert seen == ["3", "GPU-5b3c7a52-1111-2222-3333-444455556666"]
        assert all("--device cuda:0" in _cmdline(child.process.pid) for child in workers)
        reply = httpx.get(f"http://127.0.0.1:{cluster.port}/v1/cluster").json()
        assert [b["state"] for b in reply["backends"]] == ["ready", "ready"]
    finally:
        cluster.stop()


def test_a_worker_port_another_program_took_is_replaced_before_the_gateway_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`up` picks each worker a free port; another program may bind it before the worker does."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()  # the other program, already listening where worker-0 was sent
        taken = holder.getsockname()[1]
        handed = [taken]
        monkeypatch.setattr(local_cluster, "free_port", lambda: handed.pop() if handed else free_port())
        cluster = LocalCluster(
            workers=2, model="synthetic", checkpoint=None, port=free_port(), policy="round_robin", threads=None
        )
        try:
            assert cluster.start()
            workers = [child for child in cluster.children if child.name.startswith("worker")]
            assert sorted(child.name for child in workers) == ["worker-0", "worker-1"]
            assert all(child.process.poll() is None for child in workers)  # the one that lost its port is gone
            reply = httpx.get(f"http://127.0.0.1:{cluster.port}/v1/cluster").json()
            addresses = [b["address"] for b in reply["backends"]]
            assert len(addresses) == 2 and f"127.0.0.1:{taken}" not in addresses
            assert [b["state"] for b in reply["backends"]] == ["ready", "ready"]
            assert "the port is in use" in (cluster.log_dir / "worker-0.log").read_text()
        finally:
            cluster.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpus", "all"], "no NVIDIA GPU is visible"),
        (["--gpus", "0", "--workers", "2"], "leave out --workers"),
    ],
)
def test_up_refuses_gpus_it_cannot_start_on(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "depthserve", "up", "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "200"},  # no GPU, whatever the machine has
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
