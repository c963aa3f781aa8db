"""An asyncio event loop on a virtual clock: sleeps, timeouts and deadlines pass at once, in order, reproducibly.

Whenever nothing is ready to run, the loop jumps its clock to the next timer instead of waiting, so code
written for asyncio (the dispatcher's deadlines, health-check intervals, per-try timeouts) runs unchanged
and as fast as the CPU allows. Unit tests use it to test timing without waiting or racing the machine;
the simulator uses it to drive the real gateway path through hours of traffic. Nothing may do real I/O
or wait on a thread on such a loop: it would never be woken.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class Deadlock(RuntimeError):
    """Every task waits and no timer is due: on a virtual clock nothing can ever wake them."""


class _JumpingSelector(selectors.BaseSelector):
    """Never waits: a select with a timeout moves the loop's clock by that timeout and reports no I/O."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop
        self._keys: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._keys[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._keys.pop(fd)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise Deadlock("every task waits and no timer is due: nothing on the virtual clock can wake them")
        self._loop.advance(max(0.0, timeout))
        return []

    def close(self) -> None:
        self._keys.clear()

    def get_map(self) -> Mapping[Any, selectors.SelectorKey]:
        return self._keys


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose `time()` is virtual seconds, advanced only when the loop would wait."""

    def __init__(self, start: float = 0.0) -> None:
        self._virtual_now = start
        self.jumps = 0  # times the clock moved on, for tests
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        """Virtual seconds since the loop's start value."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the clock on (the selector does this when nothing is ready)."""
        if seconds > 0:
            self._virtual_now += seconds
            self.jumps += 1


def run(main: Coroutine[Any, Any, T], start: float = 0.0) -> T:
    """Run `main` to completion on a fresh virtual-time loop, like `asyncio.run`."""
    loop = VirtualTimeLoop(start)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            asyncio.set_event_loop(None)
            loop.close()
