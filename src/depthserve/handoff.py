"""Wait for a slot that another task hands over: the one race-free way the gateway's queues wait.

A queue's owner grants a waiting `Ticket` when a slot frees (handing the slot over directly, so no
newcomer can take it in between), or refuses it with an error (shed). The waiter's side is `wait`,
which settles the three races every such queue has, once: a grant that lands as the timeout fires is
kept; a grant that lands as the waiter is cancelled is passed on (`pass_on`), never lost; a waiter
that gives up is taken out of the queue (`withdraw`). Admission, the backend slot queue and the
retry budget all wait through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Ticket:
    """One waiter's place: granted (a slot is now its own) or refused with an error, once, by the queue's owner."""

    __slots__ = ("_future",)

    def __init__(self) -> None:
        self._future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def open(self) -> bool:
        """Whether it still waits: neither granted, refused nor withdrawn."""
        return not self._future.done()

    @property
    def granted(self) -> bool:
        """Whether a slot was handed to it."""
        future = self._future
        return future.done() and not future.cancelled() and future.exception() is None

    def grant(self) -> bool:
        """Hand it a slot; False (and nothing handed) if it no longer waits."""
        if not self.open:
            return False
        self._future.set_result(None)
        return True

    def refuse(self, error: BaseException) -> None:
        """Turn it away with `error`, which its `wait` raises."""
        if self.open:
            self._future.set_exception(error)

    def _close(self) -> None:
        if self.open:
            self._future.cancel()
        elif not self._future.cancelled():
            self._future.exception()  # seen: no "exception never retrieved" for a refusal that lost a race


async def wait(
    ticket: Ticket, timeout_s: float | None, pass_on: Callable[[], object], withdraw: Callable[[], object]
) -> bool:
    """Wait up to `timeout_s` for `ticket`: True once granted, False on timeout; raise its refusal.

    `withdraw` takes an ungranted ticket out of its queue (on timeout or cancellation); `pass_on` gives
    away a slot granted to a waiter that was cancelled at the same moment.
    """
    try:
        await asyncio.wait((ticket._future,), timeout=None if timeout_s is None else max(0.0, timeout_s))
    except asyncio.CancelledError:
        if ticket.granted:
            pass_on()
        else:
            ticket._close()
            withdraw()
        raise
    if ticket.granted:
        return True  # including a grant that landed together with the timeout: it is kept
    if ticket._future.done():
        withdraw()
        error = ticket._future.exception()
        assert error is not None
        raise error
    ticket._close()
    withdraw()
    return False
