"""Bare ASGI reads and writes for the hot routes, where Starlette's Request/Response layers cost ~0.2 ms."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable

from starlette.types import Message, Receive, Scope, Send

from depthserve.gateway.edge.upload_budget import UploadLease
from depthserve.gateway.errors import GatewayError

DRAIN_LIMIT = 256 * 1024 * 1024  # read at most this much of a refused upload before answering over HTTP/2
EARLY_DRAIN_LIMIT = 8 * 1024 * 1024  # for answers given before the body was wanted (401, 429, 503): less
BODY_STARTED = "depthserve.body_started"  # scope key set once the body reader has taken over the stream
INSPECT_AT = 64 * 1024  # an image header not readable within this many bytes is left to the worker
DRAIN_TIMEOUT_S = 5.0  # a refused client that stops sending gets its answer (or a reset) after this long


def header_map(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Decode ASGI headers into a dict with lower-case names (ASGI already lower-cases them)."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in raw}


def body_started(scope: Scope) -> bool:
    """Whether the body reader already consumed (or drained) this request's body."""
    return bool(scope.get(BODY_STARTED))


async def drain(receive: Receive, already: int, limit: int = DRAIN_LIMIT) -> None:
    """Read and drop the rest of a refused upload (up to `limit` bytes and DRAIN_TIMEOUT_S in all).

    Over HTTP/2, a reply sent while the client is still uploading reaches curl and httpx only as a
    stream reset, not as the 4xx; over HTTP/1.1 the reply goes out at once and the connection closes.
    """
    size = already
    more = True
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):  # a stalled upload must not hold its task forever
            while more and size <= limit:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                size += len(message.get("body", b""))
                more = message.get("more_body", False)
    except TimeoutError:
        return


class BodyReader:
    """Reads a request body under a size limit, refusing early where the protocol lets the client see it.

    With a `lease`, every byte is counted against the client's and the gateway's upload budget as it arrives.
    """

    def __init__(
        self, receive: Receive, limit: int, http2: bool, scope: Scope | None = None, lease: UploadLease | None = None
    ) -> None:
        if scope is not None:
            scope[BODY_STARTED] = True
        self._receive = receive
        self.limit = limit
        self.http2 = http2
        self.lease = lease
        self.size = 0
        self._chunks: list[bytes] = []  # the body read so far, dropped at once if the request is refused

    async def refuse(self, error: GatewayError, always: bool = False) -> GatewayError:
        """Prepare to answer `error` mid-upload: over HTTP/2 (or `always`) drain first so the client sees the answer.

        Budget refusals drain over HTTP/1.1 too (the rest is under the body limit and held nowhere): an
        HTTP/1.1 client still sending when the answer and the close come sees only a broken connection.
        What was read is dropped and its bytes given back to the budget before the drain starts.
        """
        self._chunks.clear()
        if self.lease is not None:
            self.lease.discard()
        if self.http2 or always:
            await drain(self._receive, self.size, self.limit if not self.http2 else DRAIN_LIMIT)
        return error

    def too_large(self, shown: str) -> GatewayError:
        """The 413 for a body over the limit."""
        return GatewayError(413, "body_too_large", f"request body of {shown} bytes exceeds the {self.limit}-byte limit")

    async def receive(self) -> Message:
        """An ASGI receive that counts bytes and raises 413 past the limit (for streaming parsers)."""
        message = await self._receive()
        if message["type"] == "http.disconnect":
            raise GatewayError(499, "client_disconnected", "client went away during the upload")
        size = len(message.get("body", b""))
        self.size += size
        if self.size > self.limit:
            raise await self.refuse(self.too_large(f"more than {self.limit}"))
        if self.lease is not None:
            try:
                self.lease.add(size)
            except GatewayError as error:
                raise await self.refuse(error, always=True) from None
            if not message.get("more_body", False):
                self.lease.received()
        return message

    async def read(self, declared: str | None, inspect: Callable[[bytes, bool], bool] | None = None) -> bytes:
        """Read the whole body as one bytes object (see `read_pieces`)."""
        pieces = await self.read_pieces(declared, inspect)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def read_pieces(
        self, declared: str | None, inspect: Callable[[bytes, bool], bool] | None = None
    ) -> list[bytes]:
        """Read the whole body as the pieces it arrived in (joined later, once, where it is needed whole).

        `inspect(head, final)` sees each longer head until it returns True (decided), and may raise to
        refuse the upload before the rest is read.
        """
        if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > self.limit:
            raise await self.refuse(self.too_large(declared))
        chunks = self._chunks
        buffered = 0
        more = True
        while more:
            message = await self.receive()
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            if chunk:
                chunks.append(chunk)
                buffered += len(chunk)
            if inspect is not None and chunk:
                head = b"".join(chunks)
                chunks[:] = [head]
                try:
                    decided = inspect(head, buffered >= INSPECT_AT or not more)
                except GatewayError as error:
                    raise await self.refuse(error) from None
                if decided:
                    inspect = None
        self._chunks = []
        return chunks


def raw_headers(content_type: str, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """ASGI response headers: the content type, then `headers`."""
    encoded = [(b"content-type", content_type.encode("latin-1"))]
    return encoded + [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


async def send_bytes(send: Send, status: int, body: bytes, content_type: str, headers: dict[str, str]) -> None:
    """Send a small complete response in two ASGI messages (large replies go through ReplyBudget.write)."""
    encoded = [*raw_headers(content_type, headers), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": encoded})
    await send({"type": "http.response.body", "body": body})


async def send_piece(send: Send, body: bytes, timeout_s: float) -> None:
    """Send one piece of a streamed reply, raising TimeoutError if the client reads nothing for `timeout_s`.

    Not asyncio.wait_for: on Python 3.11 it swallows a cancel that lands as the send completes, and the
    stream it belongs to (a video whose client went away) would go on to the end.
    """
    async with asyncio.timeout(timeout_s):
        await send({"type": "http.response.body", "body": body, "more_body": True})


async def send_error(send: Send, error: GatewayError, request_id: str) -> None:
    """Send a GatewayError as `{"error", "reason"}` JSON with Retry-After or WWW-Authenticate where they apply."""
    body = json.dumps({"error": error.message, "reason": error.reason}).encode()
    await send_bytes(send, error.status, body, "application/json", error.headers(request_id))


async def send_failure(scope: Scope, receive: Receive, send: Send, error: GatewayError, request_id: str) -> None:
    """Answer a refused request; over HTTP/2, first drain an upload nobody read, so the client sees the answer."""
    if scope.get("http_version") == "2" and not body_started(scope):
        await drain(receive, 0, EARLY_DRAIN_LIMIT)
    await send_error(send, error, request_id)
