"""ModelStreamInfer's window: a client cannot make the gateway hold more than a window of requests or replies."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from depthserve.gateway.oip.stream import STREAM_WINDOW, answer_stream


class Requests:
    """An endless client: counts how many requests the server has read."""

    def __init__(self, limit: int | None = None) -> None:
        self.read = 0
        self.limit = limit

    def __aiter__(self) -> AsyncIterator[int]:
        return self

    async def __anext__(self) -> int:
        if self.limit is not None and self.read >= self.limit:
            raise StopAsyncIteration
        self.read += 1
        return self.read


async def settle() -> None:
    """Let every task that can run do so (no clock involved)."""
    for _ in range(200):
        await asyncio.sleep(0)


async def test_reading_stops_at_the_window_while_answers_run() -> None:
    requests, release = Requests(), asyncio.Event()

    async def answer(request: int) -> int:
        await release.wait()
        return request

    replies = answer_stream(requests, answer, window=4)
    first = asyncio.ensure_future(anext(replies))
    await settle()
    assert requests.read == 4  # not one more, however fast the client sends
    release.set()
    assert await first in {1, 2, 3, 4}
    await settle()
    assert requests.read == 4  # three replies wait to be sent, one is held by the consumer: still full
    await anext(replies)
    await settle()
    assert requests.read == 5  # the first reply was sent: one more request may be read
    await replies.aclose()


async def test_a_client_that_never_reads_replies_holds_back_its_own_requests() -> None:
    requests = Requests()

    async def answer(request: int) -> int:
        return request

    replies = answer_stream(requests, answer)
    first = await anext(replies)  # the consumer takes one reply and then stalls, as a slow client does
    await settle()
    assert first == 1 and requests.read == STREAM_WINDOW
    await replies.aclose()


async def test_every_request_gets_its_reply_and_the_stream_ends() -> None:
    async def answer(request: int) -> int:
        await asyncio.sleep(0)
        return request * 10

    got = [reply async for reply in answer_stream(Requests(limit=50), answer, window=3)]
    assert sorted(got) == [10 * n for n in range(1, 51)]


async def test_closing_the_stream_cancels_every_running_answer() -> None:
    started: list[int] = []
    cancelled: list[int] = []

    async def answer(request: int) -> int:
        started.append(request)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(request)
            raise
        return request

    replies = answer_stream(Requests(), answer, window=5)
    waiting = asyncio.ensure_future(anext(replies))
    await settle()
    waiting.cancel()  # what gRPC does when the client cancels the call
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert sorted(cancelled) == sorted(started) == [1, 2, 3, 4, 5]
    assert len(asyncio.all_tasks()) == 1  # only this test: no reader or answer outlives the stream


async def test_a_failing_request_reader_ends_the_stream_quietly() -> None:
    class Broken:
        def __aiter__(self) -> AsyncIterator[int]:
            return self

        async def __anext__(self) -> int:
            raise RuntimeError("the call is over")  # as gRPC does for a read after the call ended

    async def answer(request: int) -> int:
        return request

    assert [reply async for reply in answer_stream(Broken(), answer)] == []
