"""Each gateway process answers its siblings on a Unix socket, so whichever one a scrape or an operator reaches
can speak for the whole gateway: /metrics, /v1/cluster and its history are gathered from every process, a
drain is applied in every process.

One request per connection: the asker writes `OP [ARG...]\\n`, the answerer writes its reply and closes.
The sockets live in the gateway's private directory (mode 0700).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from depthserve.gateway.processes.share import ProcessShare

ASK_TIMEOUT_S = 2.0  # a sibling that does not answer in this long is left out of the answer
Handler = Callable[[list[str]], Awaitable[bytes]]
log = logging.getLogger("depthserve.gateway")


class PeerServer:
    """Answers this process's siblings with `handlers[OP](args)`."""

    def __init__(self, share: ProcessShare, handlers: dict[str, Handler]) -> None:
        self._share = share
        self._handlers = handlers
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        """Listen on this process's socket."""
        path = self._share.socket(self._share.index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # left by a process this one replaces
        self._server = await asyncio.start_unix_server(self._answer, path=str(path))

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(ASK_TIMEOUT_S):
                line = await reader.readline()
            op, *args = line.decode().split()
            handler = self._handlers.get(op)
            writer.write(b"" if handler is None else await handler(args))
            await writer.drain()
        except Exception:  # noqa: BLE001 - a bad or broken ask must not touch the serving process
            log.exception("answering a sibling process failed")
        finally:
            writer.close()

    async def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def _ask(share: ProcessShare, index: int, line: str) -> bytes | None:
    try:
        async with asyncio.timeout(ASK_TIMEOUT_S):
            reader, writer = await asyncio.open_unix_connection(str(share.socket(index)))
            try:
                writer.write(line.encode() + b"\n")
                await writer.drain()
                return await reader.read()
            finally:
                writer.close()
    except (OSError, TimeoutError) as exc:
        log.warning("gateway process %d did not answer %r: %s", index, line.split()[0], exc)
        return None


async def ask_siblings(share: ProcessShare, op: str, *args: str) -> dict[int, bytes]:
    """Ask every other process; give the answers by process number (those that answered)."""
    line = " ".join((op, *args))
    others = [index for index in range(share.processes) if index != share.index]
    answers = await asyncio.gather(*(_ask(share, index, line) for index in others))
    return {index: answer for index, answer in zip(others, answers, strict=True) if answer is not None}
