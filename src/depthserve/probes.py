"""Blocking readiness probes and port picking, shared by `depthserve up`, tests and benchmarks."""

from __future__ import annotations

import os
import socket
from contextlib import suppress
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

TCP_LISTEN = "0A"  # the LISTEN state in /proc/net/tcp
HAS_PROC_NET = Path("/proc/self/net/tcp").exists()  # Linux: which process holds a port can be told


def free_port() -> int:
    """Ask the kernel for a free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def grpc_serving(address: str, timeout: float = 1.0) -> bool:
    """Whether a worker's gRPC health service answers SERVING."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def http_status(url: str, path: str, timeout: float = 1.0) -> int | None:
    """GET url+path and give the status code, or None when nothing answers."""
    try:
        return httpx.get(url + path, timeout=timeout).status_code
    except httpx.HTTPError:
        return None


def http_ready(url: str) -> bool:
    """Whether a gateway's /readyz answers 200."""
    return http_status(url, "/readyz") == 200


def port_of(target: str) -> int:
    """The port of a HOST:PORT address or of a URL that names one."""
    return int(target.rsplit(":", 1)[1].split("/", 1)[0])


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` holds a listening TCP socket on `port` (Linux /proc): the server there is that one.

    A health check cannot tell: another process may have taken the port between choosing and binding it.
    Without /proc (not Linux) nothing can be told, and the health check is taken at its word (True).
    """
    if not HAS_PROC_NET:
        return True
    sockets = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{fields[9]}]")
    if not sockets:
        return False
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in descriptors:
        with suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                return True
    return False
