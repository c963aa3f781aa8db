"""Test helpers' child processes: a test run killed outright leaves no worker or gateway behind, and a server a
test starts is its own, not another test's on the same port."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from depthserve.parent_death import PARENT_PID_ENV
from depthserve.probes import free_port, grpc_serving, listens
from depthserve.testing import processes
from depthserve.testing.processes import pid_alive, start_gateway, start_worker

PARENT = """
import sys, time
from pathlib import Path
from depthserve.testing.processes import start_worker
proc, address = start_worker(Path(sys.argv[1]))
print(proc.pid, flush=True)
time.sleep(600)
"""


def test_a_killed_test_run_leaves_no_worker_behind(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    assert pid_alive(worker)
    parent.kill()  # SIGKILL: no fixture teardown, no atexit
    parent.wait()
    deadline = time.monotonic() + 30
    while pid_alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(worker), "the worker outlived the process that started it"


THREADED = """
import sys, threading, time
from pathlib import Path
from depthserve.testing.processes import start_worker
started = []
thread = threading.Thread(target=lambda: started.append(start_worker(Path(sys.argv[1]))))
thread.start()
thread.join()  # the thread that forked the worker has ended; the process goes on
time.sleep(3)
print(started[0][0].pid, started[0][0].alive(), flush=True)
time.sleep(600)
"""


def test_a_worker_started_from_a_thread_outlives_that_thread_but_not_the_process(tmp_path: Path) -> None:
    """prctl's parent-death signal follows the forking thread: a worker started from a pool died with it."""
    script = tmp_path / "threaded.py"
    script.write_text(THREADED)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    try:
        pid, alive = parent.stdout.readline().split()
        worker = int(pid)
        assert alive == "True", "the worker died when the thread that started it ended"
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 30
    while pid_alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(worker), "the worker outlived the process that started it"


def test_a_child_whose_launcher_already_died_stops_at_once() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer runs, as a launcher killed before its child started
    env = {**os.environ, PARENT_PID_ENV: str(gone.pid)}
    done = subprocess.run([sys.executable, "-m", "depthserve", "--help"], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and f"pid {gone.pid}" in done.stderr and "Usage" not in done.stdout


def test_the_request_is_not_passed_on_to_grandchildren() -> None:
    code = (
        "import os; from depthserve.parent_death import end_with_parent, PARENT_PID_ENV; "
        "end_with_parent(); print(PARENT_PID_ENV in os.environ)"
    )
    env = {**os.environ, PARENT_PID_ENV: str(os.getpid())}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"  # else a worker's own children would stop at once


def test_a_worker_is_told_apart_by_the_listener_it_holds(tmp_path: Path) -> None:
    (one, one_address), (two, two_address) = start_worker(tmp_path, name="one"), start_worker(tmp_path, name="two")
    try:
        ports = [int(address.rsplit(":", 1)[1]) for address in (one_address, two_address)]
        assert listens(one.pid, ports[0]) and listens(two.pid, ports[1])
        assert not listens(one.pid, ports[1]) and not listens(two.pid, ports[0])
    finally:
        one.stop()
        two.stop()


def test_a_port_another_test_took_first_is_replaced_not_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two test processes can be handed the same free port: the one that binds second must not count the other's
    server as its own (a gateway in front of it lost a backend when the other test ended)."""
    foreign, foreign_address = start_worker(tmp_path, name="foreign")
    taken = int(foreign_address.rsplit(":", 1)[1])
    handed: list[int] = []  # the race, made certain: the kernel hands out a port another server took since

    def racing_free_port() -> int:
        return handed.pop() if handed else free_port()

    monkeypatch.setattr(processes, "free_port", racing_free_port)
    try:
        handed.append(taken)
        worker, address = start_worker(tmp_path, name="ours")
        try:
            assert address != foreign_address and listens(worker.pid, int(address.rsplit(":", 1)[1]))
            assert "the port is in use" in (tmp_path / f"ours-{taken}.log").read_text()
            handed.append(taken)
            gateway, url = start_gateway(tmp_path, [address])
            try:
                assert url != f"http://127.0.0.1:{taken}"
                assert "the port is in use" in (tmp_path / f"gateway-{taken}.log").read_text()
                assert httpx.get(f"{url}/v1/cluster", timeout=5).json()["backends"][0]["address"] == address
            finally:
                gateway.stop()
        finally:
            worker.stop()
        assert grpc_serving(foreign_address)  # the other test's worker was left alone
    finally:
        foreign.stop()
