"""A bare HTTP/2 client for attack tests: uploads that never send their body, replies that are never read.

httpx cannot leave a body unsent or a reply unread on purpose; this client speaks h2c with prior
knowledge on the `h2` library, binds any loopback source address (so the gateway sees a different
client), answers PING and SETTINGS like a live peer, and grants no flow-control window beyond the
`window` it announced: the server can never finish a reply it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from dataclasses import dataclass, field

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, ResponseReceived, StreamEnded, StreamReset
from h2.exceptions import ProtocolError
from h2.settings import SettingCodes


@dataclass
class AttackStreams:
    """What became of the attack's streams: reply statuses, ends, resets."""

    opened: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    ended: int = 0
    reset: int = 0


class RawH2:
    """One h2c connection from `source` that reads frames but never grants the window to read reply bodies."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str, window: int):
        self._reader = reader
        self._writer = writer
        self._authority = authority.encode()
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        self.conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.seen = AttackStreams()
        self.closed = False
        self._unsent: dict[int, tuple[bytearray, bool]] = {}  # body bytes waiting for the server's window
        self._flush()
        self._task = asyncio.create_task(self._read_loop())

    @classmethod
    async def open(cls, host: str, port: int, source: str, window: int = 1024) -> RawH2:
        """Connect from `source` (any 127/8 address reaches loopback on Linux)."""
        reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        return cls(reader, writer, f"{host}:{port}", window)

    def post(self, path: str, headers: dict[str, str], body: bytes = b"", end: bool = True) -> int:
        """Start a POST; `end=False` leaves the body open (a stalled upload). Gives the stream id."""
        stream_id = self.conn.get_next_available_stream_id()
        pseudo = [
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":authority", self._authority),
            (b":path", path.encode()),
        ]
        fields = pseudo + [(name.encode(), value.encode()) for name, value in headers.items()]
        self.conn.send_headers(stream_id, fields, end_stream=end and not body)
        if body:
            self._unsent[stream_id] = (bytearray(body), end)
        self.seen.opened += 1
        self._pump()
        return stream_id

    @property
    def room(self) -> int:
        """Streams the server still lets this connection open."""
        return 0 if self.closed else self.conn.remote_settings.max_concurrent_streams - self.conn.open_outbound_streams

    async def close(self) -> None:
        """Drop the connection."""
        self.closed = True
        self._writer.close()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def _pump(self) -> None:
        """Send what the server's flow-control windows allow of every waiting body."""
        for stream_id in list(self._unsent):
            buffer, end = self._unsent[stream_id]
            try:
                while buffer:
                    size = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
                    if size <= 0:
                        break
                    self.conn.send_data(stream_id, bytes(buffer[:size]), end_stream=end and size >= len(buffer))
                    del buffer[:size]
            except ProtocolError:  # the stream was answered or reset meanwhile
                buffer.clear()
            if not buffer:
                del self._unsent[stream_id]
        self._flush()

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self._writer.is_closing():
            self._writer.write(data)

    async def _read_loop(self) -> None:
        try:
            while True:
                data = await self._reader.read(65536)
                if not data:
                    break
                for event in self.conn.receive_data(data):  # PING and SETTINGS are acknowledged by h2 itself
                    if isinstance(event, ResponseReceived):
                        status = dict(event.headers).get(b":status", b"0")
                        self.seen.statuses[int(status)] += 1
                    elif isinstance(event, StreamEnded):
                        self.seen.ended += 1
                    elif isinstance(event, StreamReset):
                        self.seen.reset += 1
                    elif isinstance(event, ConnectionTerminated):
                        return
                self._pump()
        except (OSError, ProtocolError):
            pass
        finally:
            self.closed = True
