"""A tiny HTTP/1.1 server on the worker's event loop that answers GET /metrics.

It runs on the loop (not prometheus_client's thread server) so collectors read the worker's state from
the thread that owns it; a scrape is one short request, so no keep-alive or chunking is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger("depthserve.telemetry")
_MAX_HEAD = 16 * 1024


def _response(status: str, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class MetricsServer:
    """Serves `registry` in the Prometheus text format at /metrics on host:port (0 picks a free port)."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self._registry = registry
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        """Bind and start serving; give the port bound."""
        self._server = await asyncio.start_server(self._handle, self._host, self._port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5.0):
                head = await reader.readuntil(b"\r\n\r\n")
            method, target, *_ = head[:_MAX_HEAD].split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            path = target.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                reply = _response("405 Method Not Allowed", b"use GET /metrics\n", "text/plain")
            elif path == "/metrics":
                body = generate_latest(self._registry)
                reply = _response("200 OK", b"" if method == "HEAD" else body, CONTENT_TYPE_LATEST)
            else:
                reply = _response("404 Not Found", b"metrics are at /metrics\n", "text/plain")
            writer.write(reply)
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError, ValueError):
            pass  # a client that went away or sent garbage gets nothing
        except Exception:  # noqa: BLE001 - a collector bug must not kill the worker
            log.exception("metrics scrape failed")
            with contextlib.suppress(Exception):
                writer.write(_response("500 Internal Server Error", b"collector failed\n", "text/plain"))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
