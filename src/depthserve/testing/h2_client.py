"""An HTTP/2 (h2c) client for load generation that hands each reply over the moment its last frame arrives.

httpx's HTTP/2 (httpcore 1.0) reads the socket only for a stream that is waiting on it, one stream at a
time under a connection-wide lock, with a blocking read each turn: a reply whose frames are already in
waits until every stream queued on the lock before it has been given a frame of its own. With a dozen
requests waiting on the gateway's queue on one connection, replies reached the load generator 1-3.5 s
after the gateway sent them (round robin at 50% on bench/policies.py's cluster; the gateway's own
timestamps against the client's), and the bench measured its client, not the gateway. Here one reader
per connection takes every frame as it comes, gives each stream its events and returns the flow-control
window at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

WINDOW = 2**24  # what the client lets the server send ahead on a stream and on the connection


class H2ClientError(ConnectionError):
    """The connection failed or closed under a request, or the server reset its stream."""


@dataclass
class Reply:
    """One response: status, headers (names lower-case) and the whole body."""

    status_code: int
    headers: dict[str, str]
    content: bytes

    def json(self) -> Any:
        """The body as JSON (ValueError if it is not)."""
        return json.loads(self.content)


@dataclass
class _Stream:
    """A request in flight: what came back so far, and the future its caller waits on."""

    done: asyncio.Future[Reply]
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)


def split_url(url: str) -> tuple[str, int, str]:
    """Host, port and request target (path and query) of an http:// URL; h2c is all this client speaks."""
    parts = urlsplit(url)
    if parts.scheme != "http":
        raise ValueError(f"{url}: the load generator speaks HTTP/2 cleartext (h2c) only, so an http:// URL")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.hostname or "127.0.0.1", parts.port or 80, target


class EagerH2Client:
    """One HTTP/2 connection to `host:port` (bound to `local_address` if given), opened on first use."""

    def __init__(self, host: str, port: int, local_address: str | None = None, timeout_s: float = 30.0) -> None:
        self.host, self.port, self.local_address, self.timeout_s = host, port, local_address, timeout_s
        self._h2: h2.connection.H2Connection | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._streams: dict[int, _Stream] = {}
        self._connecting = asyncio.Lock()
        self._changed = asyncio.Event()  # set when window or stream room may have grown, or the connection ended

    @classmethod
    def of(cls, url: str, local_address: str | None = None, timeout_s: float = 30.0) -> EagerH2Client:
        """A client of the host of `url` (http:// only)."""
        host, port, _ = split_url(url)
        return cls(host, port, local_address, timeout_s)

    async def post(self, path: str, body: bytes, headers: dict[str, str], timeout_s: float | None = None) -> Reply:
        """POST `body` to `path`; TimeoutError after `timeout_s` (the client's unless given), H2ClientError if the
        connection fails."""
        async with asyncio.timeout(self.timeout_s if timeout_s is None else timeout_s):
            conn = await self._connection()
            while conn.open_outbound_streams >= conn.remote_settings.max_concurrent_streams:
                await self._wait_change(conn)
            stream_id = conn.get_next_available_stream_id()
            stream = _Stream(asyncio.get_running_loop().create_future())
            self._streams[stream_id] = stream
            try:
                fields = [
                    (":method", "POST"),
                    (":scheme", "http"),
                    (":authority", f"{self.host}:{self.port}"),
                    (":path", path),
                    ("content-length", str(len(body))),
                    *((name.lower(), value) for name, value in headers.items()),
                ]
                conn.send_headers(stream_id, fields, end_stream=not body)
                await self._send_body(conn, stream_id, memoryview(body))
                return await stream.done
            except h2.exceptions.ProtocolError as error:  # the connection closed under it: as any connection failure
                self._cancel(conn, stream_id)
                raise H2ClientError(f"request not sent: {error}") from error
            except BaseException:
                self._cancel(conn, stream_id)
                raise

    async def aclose(self) -> None:
        """Close the connection; requests still in flight fail."""
        reading, writer = self._reader_task, self._writer
        self._closed(H2ClientError("client closed"))
        if reading is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        if writer is not None:
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _connection(self) -> h2.connection.H2Connection:
        async with self._connecting:
            if self._h2 is None:
                local = (self.local_address, 0) if self.local_address else None
                reader, writer = await asyncio.open_connection(self.host, self.port, local_addr=local)
                conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
                conn.initiate_connection()
                conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: WINDOW})
                conn.increment_flow_control_window(WINDOW)
                writer.write(conn.data_to_send())
                self._h2, self._writer = conn, writer
                self._reader_task = asyncio.create_task(self._read(conn, reader))
            return self._h2

    async def _send_body(self, conn: h2.connection.H2Connection, stream_id: int, body: memoryview) -> None:
        """Send the body in frames the server's window and frame size allow, waiting for room when there is none."""
        while body:
            room = min(conn.local_flow_control_window(stream_id), conn.max_outbound_frame_size, len(body))
            if room <= 0:
                self._flush()
                await self._wait_change(conn)
                continue
            conn.send_data(stream_id, body[:room].tobytes(), end_stream=room == len(body))
            body = body[room:]
        self._flush()
        if self._writer is not None:
            await self._writer.drain()

    async def _wait_change(self, conn: h2.connection.H2Connection) -> None:
        self._changed.clear()
        await self._changed.wait()
        if self._h2 is not conn:
            raise H2ClientError("connection closed while waiting to send")

    def _flush(self) -> None:
        if self._h2 is not None and self._writer is not None:
            data = self._h2.data_to_send()
            if data:
                self._writer.write(data)

    async def _read(self, conn: h2.connection.H2Connection, reader: asyncio.StreamReader) -> None:
        """Take every frame as it arrives and hand each stream its events (the one reader of the connection)."""
        try:
            while data := await reader.read(65536):
                for event in conn.receive_data(data):
                    self._on_event(conn, event)
                self._flush()
            self._closed(H2ClientError("the server closed the connection"))
        except (OSError, h2.exceptions.ProtocolError) as error:
            self._closed(H2ClientError(f"connection failed: {error}"))

    def _on_event(self, conn: h2.connection.H2Connection, event: h2.events.Event) -> None:
        stream = self._streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.ResponseReceived) and stream is not None:
            for name, value in event.headers or []:
                key, text = _text(name), _text(value)
                if key == ":status":
                    stream.status = int(text)
                else:
                    stream.headers[key] = text
        elif isinstance(event, h2.events.DataReceived):
            if stream is not None:
                stream.body += event.data or b""
            with contextlib.suppress(h2.exceptions.StreamClosedError):
                conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id or 0)
        elif isinstance(event, h2.events.StreamEnded) and stream is not None:
            self._finish(event.stream_id or 0, Reply(stream.status, stream.headers, bytes(stream.body)))
        elif isinstance(event, h2.events.StreamReset) and stream is not None:
            self._finish(event.stream_id or 0, H2ClientError(f"stream reset by the server ({event.error_code!r})"))
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._closed(H2ClientError(f"the server ended the connection (GOAWAY {event.error_code!r})"))
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._changed.set()

    def _finish(self, stream_id: int, outcome: Reply | BaseException) -> None:
        stream = self._streams.pop(stream_id, None)
        if stream is not None and not stream.done.done():
            if isinstance(outcome, Reply):
                stream.done.set_result(outcome)
            else:
                stream.done.set_exception(outcome)
        self._changed.set()  # a stream slot is free

    def _cancel(self, conn: h2.connection.H2Connection, stream_id: int) -> None:
        """Forget a request its caller gave up on, and reset its stream if the connection still stands."""
        stream = self._streams.pop(stream_id, None)
        if stream is not None and not stream.done.done():
            stream.done.cancel()
        if self._h2 is conn:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                conn.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            self._flush()
        self._changed.set()

    def _closed(self, error: H2ClientError) -> None:
        """Fail every request in flight and drop the connection; the next request opens a new one."""
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            if not stream.done.done():
                stream.done.set_exception(error)
                stream.done.exception()  # retrieved here: a caller that timed out never reads it
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None and self._reader_task is not asyncio.current_task():
            self._reader_task.cancel()
        self._h2 = self._writer = self._reader_task = None
        self._changed.set()


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value
