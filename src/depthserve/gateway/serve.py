"""Run the gateway app under granian (HTTP/1.1 and h2c on one port), embedded through its Python API."""

from __future__ import annotations

import os

from granian import Granian
from granian.constants import HTTPModes, Interfaces, Loops

from depthserve.gateway.app import SETTINGS_ENV
from depthserve.settings import GatewaySettings


def main(settings: GatewaySettings) -> None:
    """Serve until SIGTERM/SIGINT; one granian worker, so the pool has one view (scale with more gateways)."""
    os.environ[SETTINGS_ENV] = settings.model_dump_json()
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
    )
    server.serve()
