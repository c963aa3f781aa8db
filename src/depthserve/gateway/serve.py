"""Run the gateway app under granian (HTTP/1.1 and HTTP/2 on one port), embedded through its Python API."""

from __future__ import annotations

import os
import socket
from typing import Any

from granian import Granian
from granian._granian import SocketHolder
from granian.constants import HTTPModes, Interfaces, Loops
from granian.http import HTTP1Settings, HTTP2Settings

from depthserve.gateway.app import SETTINGS_ENV
from depthserve.gateway.edge.reply_budget import H2_SEND_BUFFER
from depthserve.gateway.processes.share import SHARED_ENV
from depthserve.gateway.processes.shared import SharedState
from depthserve.jobs.broker import broker_kind
from depthserve.ports import BACKLOG, check_free, listen_exclusive
from depthserve.settings import GatewaySettings
from depthserve.telemetry.logs import granian_log_config

MAX_AUTO_PROCESSES = 8  # the default's cap: past this, more gateways (machines) rather than more processes
KEEPALIVE_MS = 30_000  # HTTP/2 PING every 30 s on an idle connection
KEEPALIVE_TIMEOUT_S = 20  # no PING acknowledgement within this: the connection and its buffers are dropped


class _BoundOnce(Granian):  # type: ignore[misc,valid-type]
    """Granian serving a socket bound once by this process: granian's own bind sets SO_REUSEPORT on Linux,
    so a second gateway (or any program setting it) would silently share the port."""

    def __init__(self, listener: socket.socket, **options: Any) -> None:
        super().__init__(**options)
        self._listener = listener

    def _init_shared_socket(self) -> None:
        fd = self._listener.fileno()
        self._ssp = None  # no per-worker bind: every granian worker serves this one socket
        self._shd = SocketHolder(fd, False, BACKLOG)  # type: ignore[call-arg]  # (fd, is_uds, backlog); the stub lags
        self._sfd = fd
        self._sso = self._listener


def process_count(settings: GatewaySettings) -> int:
    """How many gateway processes to run: as set, else one per core (at most 8), or 1 with in-process jobs."""
    if settings.processes is not None:
        return settings.processes
    if broker_kind(settings.broker) == "in_process":
        return 1  # the in-process job queue lives in one process
    return max(1, min(len(os.sched_getaffinity(0)), MAX_AUTO_PROCESSES))


def main(settings: GatewaySettings) -> None:
    """Serve until SIGTERM/SIGINT, in `process_count` granian workers serving one socket bound once.

    Each worker process is a whole gateway with its own view of the pool (as Envoy's worker threads
    balance on their own), sharing limits through a shared block (gateway/processes/). Without TLS the
    port speaks HTTP/1.1 and h2c with prior knowledge; with a certificate, TLS with ALPN choosing h2 or
    http/1.1. Raises PortUnavailable before anything starts when a port is taken.
    """
    check_free(settings.host, settings.grpc_port, "--grpc-port")  # bound later, in the app's start-up
    processes = process_count(settings)
    listener = listen_exclusive(settings.host, settings.port)
    shared = SharedState.create(processes) if processes > 1 else None
    if shared is not None:
        os.environ[SHARED_ENV] = str(shared)
    os.environ[SETTINGS_ENV] = settings.model_copy(update={"processes": processes}).model_dump_json()
    header_bytes = settings.max_header_kb * 1024
    server = _BoundOnce(
        listener,
        target="depthserve.gateway.app:app_from_env",
        factory=True,
        address=settings.host,
        port=listener.getsockname()[1],
        interface=Interfaces.ASGI,
        http=HTTPModes.auto,
        loop=Loops.uvloop,
        workers=processes,
        backlog=BACKLOG,
        log_access=False,
        log_dictconfig=granian_log_config(settings.log_format),
        http1_settings=HTTP1Settings(max_buffer_size=max(8192, header_bytes)),
        http2_settings=HTTP2Settings(
            max_headers_size=header_bytes,
            max_send_buffer_size=H2_SEND_BUFFER,  # per stream: bounds what a reply nobody reads leaves behind
            keep_alive_interval=KEEPALIVE_MS,  # a peer that stops answering pings (not reading at all) is closed
            keep_alive_timeout=KEEPALIVE_TIMEOUT_S,
        ),
        ssl_cert=settings.tls_cert,
        ssl_key=settings.tls_key,
    )
    try:
        server.serve()
    finally:
        if shared is not None:
            SharedState.remove(shared)
