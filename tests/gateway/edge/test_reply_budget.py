"""ReplyBudget: replies go out in pieces under a write timeout, their bytes budgeted per connection and in total."""

from __future__ import annotations

import asyncio
import os

import pytest
from starlette.types import Message

from depthserve.gateway.edge.reply_budget import PIECE_BYTES, STRANDED_BYTES, ReplyBudget
from depthserve.gateway.errors import GatewayError

HEADERS = [(b"content-type", b"application/octet-stream")]


class Client:
    """The ASGI side of one connection's reply: keeps what is sent; past `reads` body pieces it stops reading."""

    def __init__(self, port: int, reads: int | None = None) -> None:
        self.scope = {"type": "http", "client": ("127.0.0.2", port)}
        self.messages: list[Message] = []
        self.reads = reads
        self.reading = asyncio.Event()
        self.gone = asyncio.Event()

    async def send(self, message: Message) -> None:
        pieces = sum(m["type"] == "http.response.body" for m in self.messages)
        if message["type"] == "http.response.body" and self.reads is not None and pieces >= self.reads:
            await self.reading.wait()  # what granian's `send` does once a stream's queue is full
        self.messages.append(message)

    async def receive(self) -> Message:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    def body(self) -> bytes:
        return b"".join(m["body"] for m in self.messages if m["type"] == "http.response.body")

    async def write(self, budget: ReplyBudget, body: bytes) -> bool:
        return await budget.write(self.scope, self.receive, self.send, 200, body, HEADERS)


async def until(condition: object) -> None:
    """Let the loop run until `condition()` holds (the test's own timeout bounds it)."""
    assert callable(condition)
    while not condition():
        await asyncio.sleep(0.001)


def test_a_reply_goes_out_in_pieces_with_its_length() -> None:
    async def run() -> None:
        budget = ReplyBudget(total_bytes=10 * PIECE_BYTES, connection_bytes=10 * PIECE_BYTES, write_timeout_s=5.0)
        client = Client(1000)
        body = os.urandom(3 * PIECE_BYTES + 17)
        assert await client.write(budget, body)
        start, *pieces = client.messages
        assert (b"content-length", str(len(body)).encode()) in start["headers"]
        assert len(pieces) == 4 and [p["more_body"] for p in pieces] == [True, True, True, False]
        assert client.body() == body
        assert budget.held == 0

    asyncio.run(run())


def test_a_small_reply_is_one_message() -> None:
    async def run() -> None:
        budget = ReplyBudget(total_bytes=PIECE_BYTES, connection_bytes=PIECE_BYTES, write_timeout_s=5.0)
        client = Client(1000)
        assert await client.write(budget, b"{}")
        assert [m["type"] for m in client.messages] == ["http.response.start", "http.response.body"]
        assert client.body() == b"{}" and budget.held == 0

    asyncio.run(run())


def test_a_client_that_stops_reading_is_abandoned_and_what_it_left_stays_counted_until_freed() -> None:
    async def run() -> None:
        budget = ReplyBudget(total_bytes=100 * PIECE_BYTES, connection_bytes=100 * PIECE_BYTES, write_timeout_s=0.05)
        client = Client(1000, reads=2)
        body = os.urandom(20 * PIECE_BYTES)
        assert not await client.write(budget, body)  # cut short; the full reply's copy is released
        assert budget.abandoned == 1
        assert budget.held == budget.stranded == min(3 * PIECE_BYTES, STRANDED_BYTES)
        client.reading.set()  # the stuck send ends (read again, reset or closed): its remains are freed
        await until(lambda: budget.held == 0)
        assert budget.stranded == 0 and len(client.body()) == 3 * PIECE_BYTES

    asyncio.run(run())


def test_a_connection_over_its_budget_gets_503_before_dispatch_and_others_do_not() -> None:
    async def run() -> None:
        budget = ReplyBudget(total_bytes=100 * PIECE_BYTES, connection_bytes=4 * PIECE_BYTES, write_timeout_s=30.0)
        stuck = Client(1000, reads=1)
        writing = asyncio.create_task(stuck.write(budget, os.urandom(4 * PIECE_BYTES)))
        await until(lambda: budget.held)
        with pytest.raises(GatewayError) as caught:
            budget.check(stuck.scope["client"])
        assert (caught.value.status, caught.value.reason) == (503, "reply_backlog")
        assert caught.value.retry_after is not None
        same_connection = Client(1000)
        with pytest.raises(GatewayError):  # a reply already made is refused too, before anything is sent
            await same_connection.write(budget, os.urandom(PIECE_BYTES))
        assert same_connection.messages == []
        other = Client(2000)
        budget.check(other.scope["client"])
        assert await other.write(budget, os.urandom(2 * PIECE_BYTES))
        stuck.reading.set()
        assert await writing
        assert budget.held == 0 and budget.refused == {"reply_backlog": 2}

    asyncio.run(run())


def test_a_request_whose_expected_reply_would_not_fit_is_refused_before_dispatch() -> None:
    async def run() -> None:
        budget = ReplyBudget(total_bytes=100 * PIECE_BYTES, connection_bytes=4 * PIECE_BYTES, write_timeout_s=30.0)
        stuck = Client(1000, reads=1)
        writing = asyncio.create_task(stuck.write(budget, os.urandom(3 * PIECE_BYTES)))
        await until(lambda: budget.held)
        budget.check(stuck.scope["client"], expected=PIECE_BYTES)  # a small reply still fits
        with pytest.raises(GatewayError) as caught:  # a big one would only be made to be refused at writing
            budget.check(stuck.scope["client"], expected=2 * PIECE_BYTES)
        assert caught.value.reason == "reply_backlog"
        budget.check(("127.0.0.2", 2000), expected=50 * PIECE_BYTES)  # alone, any reply may be sent
        stuck.reading.set()
        assert await writing

    asyncio.run(run())


def test_more_connections_from_one_address_buy_no_more_unread_replies() -> None:
    async def run() -> None:
        budget = ReplyBudget(
            total_bytes=100 * PIECE_BYTES,
            connection_bytes=4 * PIECE_BYTES,
            write_timeout_s=30.0,
            address_bytes=6 * PIECE_BYTES,
        )
        first, second = Client(1000, reads=1), Client(1001, reads=1)  # one address, two connections
        writing = [asyncio.create_task(c.write(budget, os.urandom(3 * PIECE_BYTES))) for c in (first, second)]
        await until(lambda: budget.held == 6 * PIECE_BYTES)
        with pytest.raises(GatewayError) as caught:
            budget.check(("127.0.0.2", 1002))  # a third connection of the same address, holding nothing itself
        assert caught.value.reason == "reply_backlog" and "client address" in caught.value.message
        budget.check(("127.0.0.9", 1002))  # another address is not held up
        first.reading.set()
        second.reading.set()
        assert all(await asyncio.gather(*writing))
        budget.check(("127.0.0.2", 1002))
        assert budget.held == 0

    asyncio.run(run())


def test_the_gateway_total_is_shared_by_every_connection() -> None:
    async def run() -> None:
        budget = ReplyBudget(total_bytes=4 * PIECE_BYTES, connection_bytes=100 * PIECE_BYTES, write_timeout_s=30.0)
        stuck = Client(1000, reads=1)
        writing = asyncio.create_task(stuck.write(budget, os.urandom(4 * PIECE_BYTES)))
        await until(lambda: budget.held)
        with pytest.raises(GatewayError) as caught:
            budget.check(("127.0.0.3", 4000))
        assert (caught.value.status, caught.value.reason) == (503, "reply_memory_full")
        stuck.reading.set()
        await writing
        budget.check(("127.0.0.3", 4000))

    asyncio.run(run())


def test_a_client_that_goes_away_ends_the_reply_without_counting_it_abandoned() -> None:
    async def run() -> None:
        budget = ReplyBudget(total_bytes=100 * PIECE_BYTES, connection_bytes=100 * PIECE_BYTES, write_timeout_s=30.0)
        client = Client(1000, reads=2)
        writing = asyncio.create_task(client.write(budget, os.urandom(10 * PIECE_BYTES)))
        await until(lambda: len(client.messages) == 3)
        client.gone.set()
        assert not await writing
        assert budget.held == 0 and budget.abandoned == 0

    asyncio.run(run())
