"""The machine's floor for a refusal: a server that answers every HTTP/1.1 request 503 at once, doing nothing else.

bench/abuse.py runs it on the gateway's core and its probe times it in turn with the gateway, so a
503 p99 can be read against what the same core, at the same moment, gives a server with no work to do
(on a VM, a sleeping virtual CPU takes milliseconds to wake: that is in both figures).

    python bench/floor_server.py    # prints its port, serves until killed
"""

from __future__ import annotations

import asyncio
import socket

import uvloop

REPLY = b'{"reason": "floor"}'
RESPONSE = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(REPLY),
    REPLY,
)


class Refuse(asyncio.Protocol):
    """Read each request's head and body (by content-length), answer the canned 503."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(RESPONSE)


async def serve() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server = await asyncio.get_running_loop().create_server(Refuse, sock=listener)
    print(listener.getsockname()[1], flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve())
