"""A private etcd server for tests: a real `etcd` process on free loopback ports, stopped and restarted at will."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

from depthserve.probes import free_port

READY_TIMEOUT_S = 30.0


def etcd_binary() -> str | None:
    """The etcd server on this machine (Debian's etcd-server package), or None."""
    return shutil.which("etcd")


class EtcdServer:
    """One etcd member with its data in `data_dir`, so a restart keeps its keys and leases."""

    def __init__(self, data_dir: Path, client_port: int | None = None) -> None:
        binary = etcd_binary()
        if binary is None:
            raise FileNotFoundError("etcd is not installed (Debian: apt-get install etcd-server)")
        self.binary = binary
        self.data_dir = data_dir
        self.client_port = client_port or free_port()
        self.peer_port = free_port()
        self.log = data_dir.with_suffix(".log")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """HOST:PORT of the client API."""
        return f"127.0.0.1:{self.client_port}"

    def start(self) -> EtcdServer:
        """Start the member and wait until it answers its health endpoint."""
        client = f"http://{self.endpoint}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    "--name", "test",
                    "--data-dir", str(self.data_dir),
                    "--listen-client-urls", client,
                    "--advertise-client-urls", client,
                    "--listen-peer-urls", peer,
                    "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", f"test={peer}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        import httpx

        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"etcd exited with {self.process.returncode}:\n{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"http://{self.endpoint}/health", timeout=1.0).json().get("health") == "true":
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"etcd not healthy after {READY_TIMEOUT_S}s:\n{self.log.read_text()[-2000:]}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the member (SIGKILL: as a crash) and wait for it."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(15.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
