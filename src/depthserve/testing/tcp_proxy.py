"""A TCP proxy in a background thread whose connections a test can cut (a network failure) or freeze (SIGSTOP)."""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress

from depthserve.probes import free_port


class TcpProxy:
    """Forwards 127.0.0.1:port to a target; `cut()` drops every connection and refuses new ones until `restore()`."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.cuts = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()  # cleared by freeze(): bytes are held, connections stay open
        self._flowing.set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._call(self._listen())

    def _call(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(OSError, asyncio.CancelledError):
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def cut(self) -> None:
        """Abort every proxied connection and stop accepting, as if the broker vanished."""
        self.cuts += 1
        self._call(self._cut())

    def restore(self) -> None:
        """Accept connections again."""
        self._call(self._listen())

    def freeze(self) -> None:
        """Hold every byte in both directions with connections open, like a SIGSTOPped peer."""
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def thaw(self) -> None:
        """Let the held bytes and new ones through again."""
        self._loop.call_soon_threadsafe(self._flowing.set)

    def close(self) -> None:
        """Cut everything and stop the thread."""
        self._call(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
