"""A bare h2c client on the h2 library, for load and attack clients that httpx cannot be: cheap per request,
able to leave a body unsent or a reply unread, and bound to any loopback source address."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import ConnectionTerminated, DataReceived, ResponseReceived, StreamEnded, StreamReset
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes


@dataclass
class Stream:
    """One request's progress: its status once the reply headers came, and how it ended."""

    stream_id: int
    started: float
    done: asyncio.Future[str]  # "ended", "reset" or "closed" (the connection went away)
    status: int | None = None
    received: int = 0
    elapsed_ms: float = field(default=float("nan"))


class H2Client:
    """One HTTP/2 connection with prior knowledge; with `window`, reply bodies are never read (flow control shut)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str, window: int | None):
        self._reader = reader
        self._writer = writer
        self._authority = authority.encode()
        self.read_bodies = window is None
        config = H2Configuration(
            client_side=True,
            header_encoding=None,
            validate_outbound_headers=False,  # our own fixed headers: skip the per-request checks (CPU)
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
        )
        self.conn = H2Connection(config)
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.streams: dict[int, Stream] = {}
        self._unsent: dict[int, tuple[bytearray, bool]] = {}  # body bytes waiting for the peer's window, end flag
        self._body_open: set[int] = set()  # streams whose request body has not ended
        self.closed = False
        self._flush_due = False
        self._flush()
        self._task = asyncio.create_task(self._read_loop())

    @classmethod
    async def open(cls, host: str, port: int, source: str, window: int | None = None) -> H2Client:
        """Connect from `source` (any 127/8 address reaches loopback on Linux)."""
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        return cls(reader, writer, f"{host}:{port}", window)

    @property
    def room(self) -> int:
        """Streams this connection may still open under the server's limit."""
        if self.closed:
            return 0
        return int(self.conn.remote_settings.max_concurrent_streams) - len(self.streams)  # h2's own count is O(n)

    def request(self, path: str, headers: list[tuple[str, str]], body: bytes = b"", end: bool = True) -> Stream:
        """Start a POST; with `end=False` the body stays open for `send` (or forever)."""
        stream_id = self.conn.get_next_available_stream_id()
        pseudo = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":authority", self._authority),
            (b":path", path.encode()),
        ]
        self.conn.send_headers(
            stream_id, pseudo + [(k.encode(), v.encode()) for k, v in headers], end_stream=end and not body
        )
        stream = Stream(stream_id, time.perf_counter(), asyncio.get_running_loop().create_future())
        self.streams[stream_id] = stream
        if body or not end:
            self._body_open.add(stream_id)
        if body:
            self._unsent[stream_id] = (bytearray(body), end)
        self._pump()
        return stream

    def send(self, stream: Stream, data: bytes) -> None:
        """Add bytes to a still-open body (a trickle)."""
        if stream.stream_id in self.streams:
            buffer, end = self._unsent.get(stream.stream_id, (bytearray(), False))
            self._unsent[stream.stream_id] = (buffer + data, end)
        self._pump()

    async def close(self) -> None:
        """Drop the connection; every open stream ends as "closed"."""
        self._writer.close()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def _pump(self) -> None:
        """Send what the peer's flow-control windows allow of every waiting body."""
        for stream_id in list(self._unsent):
            buffer, end = self._unsent[stream_id]
            try:
                while buffer:
                    size = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
                    if size <= 0:
                        break
                    self.conn.send_data(stream_id, bytes(buffer[:size]), end_stream=end and size >= len(buffer))
                    del buffer[:size]
                if not buffer:
                    del self._unsent[stream_id]
                    if end:
                        self._body_open.discard(stream_id)
            except ProtocolError:  # the stream was reset or closed meanwhile
                self._unsent.pop(stream_id, None)
        self._flush()

    def _flush(self) -> None:
        """Write what h2 has queued once per event-loop tick, so requests started together share one send."""
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._write)

    def _write(self) -> None:
        self._flush_due = False
        data = self.conn.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    def _finish(self, stream_id: int, how: str) -> None:
        """Settle a stream; one answered before its body ended is cancelled, so it stops counting against the limit."""
        stream = self.streams.pop(stream_id, None)
        self._unsent.pop(stream_id, None)
        if stream_id in self._body_open:
            self._body_open.discard(stream_id)
            if how == "ended":
                with contextlib.suppress(ProtocolError):
                    self.conn.reset_stream(stream_id, ErrorCodes.CANCEL)
        if stream is not None and not stream.done.done():
            stream.elapsed_ms = (time.perf_counter() - stream.started) * 1000.0
            stream.done.set_result(how)

    async def _read_loop(self) -> None:
        try:
            while not self.closed:
                data = await self._reader.read(65536)
                if not data:
                    break
                for event in self.conn.receive_data(data):
                    self._on_event(event)
                self._pump()
        except (OSError, ProtocolError):
            pass
        finally:
            self.closed = True
            for stream_id in list(self.streams):
                self._finish(stream_id, "closed")
            self._writer.close()

    def _on_event(self, event: object) -> None:
        if isinstance(event, ResponseReceived) and event.stream_id in self.streams:
            self.streams[event.stream_id].status = int(dict(event.headers or [])[b":status"])
        elif isinstance(event, DataReceived) and event.stream_id in self.streams:
            self.streams[event.stream_id].received += len(event.data or b"")
            if self.read_bodies:
                self.conn.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        elif isinstance(event, StreamEnded):
            self._finish(event.stream_id or 0, "ended")
        elif isinstance(event, StreamReset):
            self._finish(event.stream_id or 0, "reset")
        elif isinstance(event, ConnectionTerminated):
            self.closed = True
