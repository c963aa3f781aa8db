"""Run the gateway app under granian (HTTP/1.1 and HTTP/2 on one port), embedded through its Python API."""

from __future__ import annotations

import os

from granian import Granian
from granian.constants import HTTPModes, Interfaces, Loops
from granian.http import HTTP1Settings, HTTP2Settings

from depthserve.gateway.app import SETTINGS_ENV
from depthserve.settings import GatewaySettings
from depthserve.telemetry.logs import granian_log_config


def main(settings: GatewaySettings) -> None:
    """Serve until SIGTERM/SIGINT; one granian worker, so the pool has one view (scale with more gateways).

    Without TLS the port speaks HTTP/1.1 and h2c with prior knowledge; with a certificate, TLS with
    ALPN choosing h2 or http/1.1.
    """
    os.environ[SETTINGS_ENV] = settings.model_dump_json()
    header_bytes = settings.max_header_kb * 1024
    server = Granian(
        "depthserve.gateway.app:app_from_env",
        factory=True,
        address=settings.host,
        port=settings.port,
        interface=Interfaces.ASGI,
        http=HTTPModes.auto,
        loop=Loops.uvloop,
        workers=1,
        log_access=False,
        log_dictconfig=granian_log_config(settings.log_format),
        http1_settings=HTTP1Settings(max_buffer_size=max(8192, header_bytes)),
        http2_settings=HTTP2Settings(max_headers_size=header_bytes),
        ssl_cert=settings.tls_cert,
        ssl_key=settings.tls_key,
    )
    server.serve()
