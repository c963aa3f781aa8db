"""The hand-over every gateway queue waits through: a grant at the timeout is kept, one at a cancel is passed on."""

from __future__ import annotations

import asyncio

import pytest

from depthserve import handoff
from depthserve.handoff import Ticket
from depthserve.testing import virtual_time


def test_a_grant_arriving_with_the_timeout_is_kept() -> None:
    async def main() -> None:
        ticket, events = Ticket(), []
        asyncio.get_running_loop().call_later(1.0, ticket.grant)  # the same instant as the timeout below
        granted = await handoff.wait(ticket, 1.0, lambda: events.append("passed on"), lambda: events.append("out"))
        assert granted and events == []  # the slot was handed over: keeping it loses nothing

    virtual_time.run(main())


def test_a_timeout_withdraws_the_waiter_and_a_later_grant_finds_nobody() -> None:
    async def main() -> None:
        ticket, events = Ticket(), []
        assert not await handoff.wait(ticket, 0.5, lambda: events.append("passed on"), lambda: events.append("out"))
        assert events == ["out"] and not ticket.open and not ticket.grant()  # the owner hands it to someone else

    virtual_time.run(main())


def test_a_waiter_cancelled_as_it_is_granted_passes_the_slot_on() -> None:
    async def main() -> None:
        ticket, events = Ticket(), []
        waiting = asyncio.ensure_future(
            handoff.wait(ticket, None, lambda: events.append("passed on"), lambda: events.append("out"))
        )
        await asyncio.sleep(0)
        ticket.grant()
        waiting.cancel()  # before the waiter ran again: it holds a slot it will never use
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert events == ["passed on"]

    virtual_time.run(main())


def test_a_refusal_is_raised_to_the_waiter() -> None:
    async def main() -> None:
        ticket = Ticket()
        asyncio.get_running_loop().call_later(0.1, ticket.refuse, ValueError("shed"))
        with pytest.raises(ValueError, match="shed"):
            await handoff.wait(ticket, 5.0, lambda: None, lambda: None)

    virtual_time.run(main())
