"""Test helpers' child processes: a test run killed outright leaves no worker or gateway behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from depthserve.parent_death import PARENT_PID_ENV
from depthserve.testing.processes import pid_alive

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
