"""Test helpers' child processes: a test run killed outright leaves no worker or gateway behind."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

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
