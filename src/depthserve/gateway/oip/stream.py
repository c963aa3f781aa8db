"""Answer a stream of requests concurrently but within a window, so a client cannot queue unbounded work or replies.

ModelStreamInfer lets a client send requests without waiting for replies. Each request holds one
of `window` permits from before it is read until its reply has been handed on, so a client that
sends faster than it reads is held back by gRPC flow control instead of by the gateway's memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TypeVar

Request = TypeVar("Request")
Reply = TypeVar("Reply")
STREAM_WINDOW = 16  # requests of one stream running or waiting to be sent; the next is read when one is sent
log = logging.getLogger("depthserve.gateway")


async def answer_stream(
    requests: AsyncIterator[Request],
    answer: Callable[[Request], Awaitable[Reply]],
    window: int = STREAM_WINDOW,
) -> AsyncGenerator[Reply, None]:
    """Give one reply per request in the order they finish, with at most `window` outstanding.

    `answer` turns its own failures into replies; when the consumer stops (the client cancelled or
    went away), every running answer is cancelled and awaited, so nothing outlives the stream.
    """
    permits = asyncio.Semaphore(window)
    replies: asyncio.Queue[Reply | None] = asyncio.Queue(maxsize=window + 1)  # each reply holds a permit; + the end
    running: set[asyncio.Task[None]] = set()

    async def one(request: Request) -> None:
        await replies.put(await answer(request))

    async def read() -> None:
        try:
            while True:
                await permits.acquire()  # before reading: the window bounds what the client can make us hold
                try:
                    request = await anext(requests)
                except StopAsyncIteration:
                    break
                task = asyncio.create_task(one(request))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        finally:
            replies.put_nowait(None)  # the end of the replies, also when reading failed or was cancelled

    reader = asyncio.create_task(read())
    try:
        while (reply := await replies.get()) is not None:
            yield reply
            permits.release()
    finally:
        reader.cancel()
        for task in list(running):
            task.cancel()
        # Await them, so their exceptions (a read on a call gRPC has ended) are retrieved, not logged as lost.
        for outcome in await asyncio.gather(reader, *running, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.debug("OIP stream ended with %r", outcome)
