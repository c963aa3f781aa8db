"""An asyncio event loop on a virtual clock: sleeps, timeouts and deadlines pass at once, in order, reproducibly.

Whenever nothing is ready to run, the loop jumps its clock to the next timer instead of waiting, so code
written for asyncio (the dispatcher's deadlines, health-check intervals, per-try timeouts) runs unchanged
and as fast as the CPU allows. Unit tests use it to test timing without waiting or racing the machine;
the simulator uses it to drive the real gateway path through hours of traffic.

It is a small loop of its own rather than asyncio's selector loop with a fake selector: with no I/O to
poll, timers kept as (when, sequence, handle) tuples compare in C and callbacks run without a selector
round, which made the simulator several times faster. Timers due at the same instant run in the order
they were scheduled. Nothing may do real I/O or wait on a thread on such a loop: it would never be woken.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import logging
from asyncio import events
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Deadlock(RuntimeError):
    """Every task waits and no timer is due: on a virtual clock nothing can ever wake them."""


class _Handle:
    """A scheduled callback (what asyncio's Handle and TimerHandle offer: cancel, cancelled, when)."""

    __slots__ = ("_callback", "_args", "_context", "_cancelled", "_when", "_loop")

    def __init__(
        self,
        callback: Callable[..., object],
        args: tuple[Any, ...],
        context: contextvars.Context,
        when: float = 0.0,
        loop: VirtualTimeLoop | None = None,
    ) -> None:
        self._callback = callback
        self._args = args
        self._context = context
        self._cancelled = False
        self._when = when
        self._loop = loop  # a timer's loop, told of its cancellation so cancelled timers do not pile up

    def cancel(self) -> None:
        """Never run it."""
        if self._cancelled:
            return
        self._cancelled = True
        self._args = ()
        loop = self._loop
        if loop is not None:
            cancelled = loop._cancelled_timers = loop._cancelled_timers + 1  # most timers are cancelled
            if cancelled > 256 and cancelled * 2 > len(loop._timers):
                loop._sweep_timers()

    def cancelled(self) -> bool:
        """Whether it was cancelled."""
        return self._cancelled

    def when(self) -> float:
        """When a timer is due (virtual seconds)."""
        return self._when

    def get_context(self) -> contextvars.Context:
        """The context it runs in."""
        return self._context


class VirtualTimeLoop(asyncio.AbstractEventLoop):
    """An event loop whose `time()` is virtual seconds, advanced to the next timer when nothing is ready."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._ready: deque[_Handle] = deque()
        self._timers: list[tuple[float, int, _Handle]] = []
        self._sequence = itertools.count()
        self._running = False
        self._stopping = False
        self._closed = False
        self._exception_handler: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None = None
        self._task_factory: Any = None
        self._cancelled_timers = 0
        self.jumps = 0  # times the clock moved on, for tests

    def time(self) -> float:
        """Virtual seconds since the loop's start value."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock on by hand (the loop does it itself when nothing is ready)."""
        if seconds > 0:
            self._now += seconds
            self.jumps += 1

    # Scheduling.
    def call_soon(self, callback: Callable[..., object], *args: Any, context: Any = None) -> _Handle:  # type: ignore[override]
        handle = _Handle(callback, args, context if context is not None else contextvars.copy_context())
        self._ready.append(handle)
        return handle

    def call_soon_threadsafe(self, callback: Callable[..., object], *args: Any, context: Any = None) -> _Handle:  # type: ignore[override]
        return self.call_soon(callback, *args, context=context)

    def call_at(self, when: float, callback: Callable[..., object], *args: Any, context: Any = None) -> _Handle:  # type: ignore[override]
        handle = _Handle(callback, args, context if context is not None else contextvars.copy_context(), when, self)
        heapq.heappush(self._timers, (when, next(self._sequence), handle))
        return handle

    def _sweep_timers(self) -> None:
        """Drop cancelled timers once they are most of the heap (a 30 s upload timeout is cancelled at once)."""
        timers = self._timers
        timers[:] = [entry for entry in timers if not entry[2]._cancelled]
        heapq.heapify(timers)
        self._cancelled_timers = 0

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any, context: Any = None) -> _Handle:  # type: ignore[override]
        return self.call_at(self._now + max(0.0, delay), callback, *args, context=context)

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(self, coro: Any, *, name: str | None = None, context: Any = None) -> asyncio.Task[Any]:
        if self._task_factory is not None:
            return self._task_factory(self, coro)
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def set_task_factory(self, factory: Any) -> None:
        self._task_factory = factory

    def get_task_factory(self) -> Any:
        return self._task_factory

    # Running.
    def run_forever(self) -> None:
        if self._running:
            raise RuntimeError("this loop is already running")
        self._running = True
        old = events._get_running_loop()
        events._set_running_loop(self)
        try:
            self._run()
        finally:
            self._stopping = False
            self._running = False
            events._set_running_loop(old)

    def _run(self) -> None:
        """Run ready callbacks, then the timers due, moving the clock to the next one when nothing is ready.

        One loop with its names bound once, not a method call per round: nearly every round of a simulation
        runs one or two callbacks, so the round's own cost counts.
        """
        ready, timers, pop, popleft = self._ready, self._timers, heapq.heappop, self._ready.popleft
        while not self._stopping:
            if not ready:
                while timers and timers[0][2]._cancelled:
                    pop(timers)
                    self._cancelled_timers -= 1
                if not timers:
                    if self._stopping:
                        return
                    raise Deadlock("every task waits and no timer is due: nothing on the virtual clock can wake them")
                when = timers[0][0]
                if when > self._now:
                    self._now = when
                    self.jumps += 1
            now = self._now
            while timers and timers[0][0] <= now:
                handle = pop(timers)[2]
                if handle._cancelled:
                    self._cancelled_timers -= 1
                else:
                    handle._loop = None  # due: cancelling it now is no timer's business
                    ready.append(handle)
            for _ in range(len(ready)):
                handle = popleft()
                if handle._cancelled:
                    continue
                try:
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:  # noqa: BLE001 - as asyncio does: report, keep the loop going
                    context = {"message": "exception in callback", "exception": exc, "handle": handle}
                    self.call_exception_handler(context)

    def run_until_complete(self, future: Any) -> Any:
        task: asyncio.Future[Any] = asyncio.ensure_future(future, loop=self)
        task.add_done_callback(lambda _: self.stop())
        self.run_forever()
        if not task.done():
            raise RuntimeError("the loop stopped before the future completed")
        return task.result()

    def stop(self) -> None:
        self._stopping = True

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._ready.clear()
        self._timers.clear()

    async def shutdown_asyncgens(self) -> None:
        return None

    async def shutdown_default_executor(self, timeout: float | None = None) -> None:
        return None

    # Errors and debugging. Every future and task asks `get_debug()` as it is made: `bool()` answers False in C,
    # without a Python frame.
    get_debug = bool

    def set_debug(self, enabled: bool) -> None:
        return None

    def set_exception_handler(self, handler: Any) -> None:
        self._exception_handler = handler

    def get_exception_handler(self) -> Any:
        return self._exception_handler

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        exception = context.get("exception")
        info = (type(exception), exception, exception.__traceback__) if exception is not None else None
        logging.getLogger("asyncio").error(context.get("message", "unhandled exception in the loop"), exc_info=info)

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        if self._exception_handler is not None:
            self._exception_handler(self, context)
        else:
            self.default_exception_handler(context)


def run(main: Coroutine[Any, Any, T], start: float = 0.0) -> T:
    """Run `main` to completion on a fresh virtual-time loop, like `asyncio.run`."""
    loop = VirtualTimeLoop(start)  # type: ignore[abstract]  # no I/O methods: nothing here may do I/O
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            loop.close()
