"""Reply bodies written in bounded pieces under a write timeout, with the bytes they hold budgeted per connection.

Granian keeps a reply sent as one ASGI message whole in memory until the client has read it, with
no limit and no timeout; sent in pieces with `more_body`, each `send` waits once granian has a few
pieces queued (HTTP/2 flow control is respected underneath). So a reply is written here as pieces,
each `send` under `write_timeout_s`, while its bytes count against its connection's budget and the
gateway's total. A client that stops reading is abandoned after the timeout: the gateway drops its
copy and stops the body short of its Content-Length, so its stream is reset (RST_STREAM
INTERNAL_ERROR, sent by hyper once that stream moves again; granian has no reset an app can ask
for). The few pieces granian still holds stay counted until then. A connection over its budget
gets 503 "reply_backlog" for new replies, before they are dispatched; so does every connection of a
client address over its own budget (opening more connections does not buy more unread replies,
nor more of the workers' time spent making them); the total over budget gives 503 "reply_memory_full".
"""

from __future__ import annotations

import asyncio
import logging
from asyncio import FIRST_COMPLETED
from collections import Counter
from collections.abc import Hashable

from starlette.types import Receive, Scope, Send

from depthserve.gateway.errors import GatewayError

PIECE_BYTES = 64 * 1024  # one `send`: granian queues up to four per stream before `send` waits
H2_SEND_BUFFER = 256 * 1024  # granian's (hyper's) HTTP/2 send buffer per stream, set in serve.py
STRANDED_BYTES = 6 * PIECE_BYTES + H2_SEND_BUFFER  # most granian holds of a reply whose client stopped reading
MIB = 1024 * 1024
log = logging.getLogger("depthserve.gateway")


def connection_of(scope: Scope) -> Hashable:
    """The client connection a request came on: its address and port (every HTTP/2 stream of it shares them)."""
    client = scope.get("client")
    return tuple(client) if client else None


class ReplyBudget:
    """Counts reply bytes held while clients read them, per connection and in total, and writes replies."""

    def __init__(
        self, total_bytes: int, connection_bytes: int, write_timeout_s: float, address_bytes: int | None = None
    ) -> None:
        address_bytes = total_bytes if address_bytes is None else address_bytes
        if min(total_bytes, connection_bytes, address_bytes) < 1 or write_timeout_s <= 0:
            raise ValueError("reply budgets must be >= 1 byte and the write timeout > 0")
        self.total_bytes = total_bytes
        self.connection_bytes = connection_bytes
        self.address_bytes = address_bytes
        self.write_timeout_s = write_timeout_s
        self.held = 0  # reply bytes held now, all connections
        # Bytes held per connection (host, port) and per client address (host); only holders have an entry.
        self._connections: dict[Hashable, int] = {}
        self.refused: Counter[str] = Counter()  # by GatewayError reason, for metrics
        self.abandoned = 0  # replies whose reader stopped reading for write_timeout_s
        self.stranded = 0  # bytes of abandoned replies granian may still hold (counted in `held` too)

    def check(self, connection: Hashable, expected: int = 0) -> None:
        """Refuse (503), before it is dispatched, a request whose reply of about `expected` bytes would take its
        connection, its client address or the gateway past a budget already holding replies."""
        for key, limit, whose in self._holders(connection):
            held = self._connections.get(key, 0)
            if held >= limit or (held and held + expected > limit):
                raise self._backlog(limit, whose)
        if self.held >= self.total_bytes or (self.held and self.held + expected > self.total_bytes):
            raise self._memory_full()

    def _holders(self, connection: Hashable) -> tuple[tuple[Hashable, int, str], ...]:
        """The budgets a reply on `connection` counts against: its connection's and its address's."""
        address = ("address", connection[0]) if isinstance(connection, tuple) and connection else None
        if address is None:
            return ((connection, self.connection_bytes, "connection"),)
        return ((connection, self.connection_bytes, "connection"), (address, self.address_bytes, "client address"))

    def _reserve(self, connection: Hashable, size: int) -> None:
        """Count a reply of `size` bytes; one reply alone may exceed a budget, so any reply can be sent."""
        holders = self._holders(connection)
        for key, limit, whose in holders:
            mine = self._connections.get(key, 0)
            if mine and mine + size > limit:
                raise self._backlog(limit, whose)
        if self.held and self.held + size > self.total_bytes:
            raise self._memory_full()
        for key, _, _ in holders:
            self._connections[key] = self._connections.get(key, 0) + size
        self.held += size

    def _release(self, connection: Hashable, size: int) -> None:
        self.held -= size
        for key, _, _ in self._holders(connection):
            left = self._connections[key] - size
            if left > 0:
                self._connections[key] = left
            else:
                del self._connections[key]

    def _backlog(self, limit: int, whose: str) -> GatewayError:
        self.refused["reply_backlog"] += 1
        return GatewayError(
            503,
            "reply_backlog",
            f"this {whose} has {limit // MIB} MiB of replies it has not read yet",
            retry_after=1.0,
        )

    def _memory_full(self) -> GatewayError:
        self.refused["reply_memory_full"] += 1
        return GatewayError(
            503,
            "reply_memory_full",
            f"the gateway holds {self.total_bytes // MIB} MiB of replies not read yet, its limit",
            retry_after=1.0,
        )

    async def write(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        status: int,
        body: bytes | memoryview,
        headers: list[tuple[bytes, bytes]],
    ) -> bool:
        """Send a response (headers include content-type; content-length is added) within the budget.

        Raises GatewayError (503) before anything is sent if the budget is spent; gives False if the
        reader stopped reading or went away, so the reply was cut short.
        """
        connection = connection_of(scope)
        size = len(body)
        self._reserve(connection, size)
        try:
            await send({"type": "http.response.start", "status": status, "headers": [*headers, _length(size)]})
            if size <= PIECE_BYTES:
                await send({"type": "http.response.body", "body": bytes(body)})  # no copy when it is bytes
                return True
            return await self._pieces(connection, receive, send, body)
        finally:
            self._release(connection, size)

    async def _pieces(self, connection: Hashable, receive: Receive, send: Send, body: bytes | memoryview) -> bool:
        """Send `body` piece by piece, stopping if the client goes away or reads nothing for the write timeout.

        One task writes every piece and this one watches it: a task and a wait per reply, not per piece
        (a 1.2 MB reply is 19 pieces), while a stuck piece is still left running, never cancelled.
        """
        gone = asyncio.ensure_future(receive())  # the body was read: the next message is http.disconnect
        progress = _Progress(body)
        writer = asyncio.ensure_future(_send_pieces(send, progress))
        try:
            while True:
                pieces = progress.sent
                await asyncio.wait((writer, gone), timeout=self.write_timeout_s, return_when=FIRST_COMPLETED)
                if writer.done():
                    writer.result()
                    return True
                if gone.done():
                    writer.cancel()
                    return False
                if progress.sent == pieces:  # not one piece went out in write_timeout_s
                    progress.body = None  # the stuck piece may still go; none after it, and the body is dropped
                    self._strand(connection, writer, min(progress.end, STRANDED_BYTES))
                    return False
        finally:
            gone.cancel()

    def _strand(self, connection: Hashable, sending: asyncio.Future[None], size: int) -> None:
        """Abandon a reply whose client stopped reading; what granian still holds of it stays counted.

        That is at most a few pieces and HTTP/2's send buffer, freed when the stuck `send` ends: when the
        client reads again, resets the stream or closes the connection.
        """
        self.abandoned += 1
        log.info("reply abandoned: the client read nothing for %gs", self.write_timeout_s)
        for key, _, _ in self._holders(connection):
            self._connections[key] = self._connections.get(key, 0) + size
        self.held += size
        self.stranded += size
        sending.add_done_callback(lambda done: self._unstrand(connection, size, done))

    def _unstrand(self, connection: Hashable, size: int, done: asyncio.Future[None]) -> None:
        if not done.cancelled():
            done.exception()  # a send to a closed stream: nothing to report
        self.stranded -= size
        self._release(connection, size)


class _Progress:
    """A reply being written: the body (None once abandoned), pieces whose `send` returned, and the end of the
    piece being sent. An abandoned reply's stuck piece may still go out, no piece after it."""

    __slots__ = ("body", "end", "sent")

    def __init__(self, body: bytes | memoryview) -> None:
        self.body: memoryview | None = memoryview(body)
        self.sent = 0
        self.end = 0


async def _send_pieces(send: Send, progress: _Progress) -> None:
    """Send each piece; the body is reached only through `progress`, so an abandoned reply's memory is freed at
    once, not when its stuck piece is."""
    assert progress.body is not None
    size = len(progress.body)
    for start in range(0, size, PIECE_BYTES):
        if progress.body is None:
            return
        progress.end = end = min(start + PIECE_BYTES, size)
        piece = bytes(progress.body[start:end])
        await send({"type": "http.response.body", "body": piece, "more_body": end < size})
        progress.sent += 1


def _length(size: int) -> tuple[bytes, bytes]:
    return (b"content-length", str(size).encode())
