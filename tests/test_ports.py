"""A port already taken is refused at once with one line, and a served port can never be shared."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from depthserve.ports import PortUnavailable, check_free, listen_exclusive
from depthserve.probes import free_port
from depthserve.testing.processes import start_gateway, start_worker

REFUSAL_TIMEOUT_S = 60  # a bound on the wait; refusing should not need the model or the workers


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """A running worker and gateway: (worker port, gateway port)."""
    logs = tmp_path_factory.mktemp("logs")
    worker, address = start_worker(logs)
    gateway, url = start_gateway(logs, [address])
    yield int(address.rsplit(":", 1)[1]), int(url.rsplit(":", 1)[1])
    gateway.stop()
    worker.stop()


def refused(*args: str) -> str:
    """Run `depthserve ARGS`, which must exit non-zero on its own, and give its only line of output."""
    done = subprocess.run(
        [sys.executable, "-m", "depthserve", *args], capture_output=True, text=True, timeout=REFUSAL_TIMEOUT_S
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode != 0, lines
    assert len(lines) == 1, "\n".join(lines)
    return lines[0]


def reuseport_bind(port: int) -> int:
    """Bind loopback:port as a server sharing ports would (SO_REUSEPORT); give 0 or the errno."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc.errno or -1
    return 0


def test_a_second_up_on_a_served_port_refuses_before_starting_workers(served: tuple[int, int]) -> None:
    _, gateway_port = served
    line = refused("up", "--port", str(gateway_port), "--workers", "1", "--model", "synthetic")
    assert f"127.0.0.1:{gateway_port}" in line and "in use" in line and "--port" in line
    assert "worker" not in line


def test_up_refuses_a_port_another_program_holds() -> None:
    with socket.socket() as other:  # a plain server of some other program: no SO_REUSEPORT
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        line = refused("up", "--port", str(port), "--workers", "1", "--model", "synthetic")
        assert f"127.0.0.1:{port}" in line and "in use" in line
        line = refused("up", "--port", str(free_port()), "--grpc-port", str(port), "--model", "synthetic")
        assert f"127.0.0.1:{port}" in line and "--grpc-port" in line


def test_a_second_gateway_on_a_served_port_refuses(served: tuple[int, int]) -> None:
    worker_port, gateway_port = served
    backends = f"127.0.0.1:{worker_port}"
    line = refused("gateway", "--port", str(gateway_port), "--backends", backends)
    assert f"127.0.0.1:{gateway_port}" in line and "--port" in line
    line = refused("gateway", "--port", "0", "--grpc-port", str(gateway_port), "--backends", backends)
    assert "--grpc-port" in line


def test_a_second_worker_on_a_served_port_refuses(served: tuple[int, int]) -> None:
    worker_port, _ = served
    line = refused("worker", "--port", str(worker_port), "--model", "synthetic")
    assert f"127.0.0.1:{worker_port}" in line and "--port" in line


def test_served_ports_cannot_be_joined_with_so_reuseport(served: tuple[int, int]) -> None:
    # A server started at the same moment, past any check, must fail too rather than share the port.
    worker_port, gateway_port = served
    assert reuseport_bind(gateway_port) == errno.EADDRINUSE
    assert reuseport_bind(worker_port) == errno.EADDRINUSE


def test_check_free_and_listen_exclusive(tmp_path: Path) -> None:
    check_free("127.0.0.1", None, "--port")  # no port asked: nothing to check
    check_free("127.0.0.1", 0, "--port")  # 0 picks a free one
    with listen_exclusive("127.0.0.1", 0) as held:
        port = held.getsockname()[1]
        with pytest.raises(PortUnavailable, match=f"127.0.0.1:{port}.*another --metrics-port"):
            check_free("127.0.0.1", port, "--metrics-port")
        assert reuseport_bind(port) == errno.EADDRINUSE
    check_free("127.0.0.1", port, "--port")  # free again once closed


def test_connections_to_the_gateway_socket_send_small_frames_at_once() -> None:
    """The exclusive bind lost granian's TCP_NODELAY: Nagle held small HTTP/2 frames for ~25 ms per request."""
    listener = listen_exclusive("127.0.0.1", 0)
    try:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        with client, accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0  # inherited from the listener
    finally:
        listener.close()
