"""Readiness probes: a port counts as a process's own only while that process listens on it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from depthserve.probes import listens


def test_a_port_is_a_process_own_only_while_it_listens_there() -> None:
    with socket.socket() as bound, socket.socket(socket.AF_INET6) as listening:
        bound.bind(("127.0.0.1", 0))  # bound, not listening: no server answers there
        listening.bind(("::1", 0))
        listening.listen()
        quiet, served = bound.getsockname()[1], listening.getsockname()[1]
        assert listens(os.getpid(), served)  # IPv6 too (/proc/net/tcp6)
        assert not listens(os.getpid(), quiet)
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            assert not listens(other.pid, served)  # a process that only exists does not own the port
        finally:
            other.kill()
            other.wait()
    assert not listens(os.getpid(), served)  # closed
    assert not listens(2**22 + 12345, served)  # no such process
