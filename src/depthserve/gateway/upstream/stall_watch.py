"""Which requests wait on which backend, so one that stops answering health checks wakes them at once.

A SIGSTOPped or wedged worker keeps the calls already sent to it until their per-try timeout. When
its health check times out (or the checks take it out), every request with an attempt there is
woken and may send a second attempt elsewhere, while the first keeps running in case it answers.
"""

from __future__ import annotations

from collections.abc import Callable


class StallWatch:
    """Per backend address, the requests with an attempt in flight there; one owner: the event loop."""

    def __init__(self) -> None:
        self._watchers: dict[str, dict[AttemptWatch, None]] = {}  # insertion-ordered: wakes reproduce
        self.resent = 0  # second attempts sent because the first's backend stopped answering health checks

    def watch(self) -> AttemptWatch:
        """A watch for one request's attempts."""
        return AttemptWatch(self)

    def stalled(self, address: str) -> None:
        """Wake every request with an attempt on `address` (each is woken once per attempt)."""
        for watcher in self._watchers.pop(address, {}):
            watcher.wake(address)

    def watching(self, address: str) -> int:
        """Requests watching a backend now, for tests."""
        return len(self._watchers.get(address, ()))


class AttemptWatch:
    """One request's attempts; `notify` is called when the backend of one of them stops answering."""

    __slots__ = ("_registry", "_addresses", "_stalled", "stalled", "notify")

    def __init__(self, registry: StallWatch) -> None:
        self._registry = registry
        self._addresses: dict[str, None] = {}
        self._stalled: list[str] = []
        self.stalled = False  # a backend of ours stopped answering since the last `take` (read once per wake-up)
        self.notify: Callable[[], None] = _nothing  # the request's wake-up, set while it waits

    def add(self, address: str) -> None:
        """Watch an attempt just sent to `address`."""
        self._registry._watchers.setdefault(address, {})[self] = None
        self._addresses[address] = None

    def discard(self, address: str) -> None:
        """Stop watching `address` (its attempt ended)."""
        self._addresses.pop(address, None)
        watchers = self._registry._watchers.get(address)
        if watchers is not None:
            watchers.pop(self, None)
            if not watchers:
                del self._registry._watchers[address]

    def wake(self, address: str) -> None:
        """Note that `address` stopped answering and wake the request."""
        self._addresses.pop(address, None)
        self._stalled.append(address)
        self.stalled = True
        self.notify()

    def take(self) -> list[str]:
        """Give the backends that stopped answering since the last take."""
        stalled, self._stalled = self._stalled, []
        self.stalled = False
        return stalled

    def close(self) -> None:
        """Stop watching everything (the request is over)."""
        for address in list(self._addresses):
            self.discard(address)


def _nothing() -> None:
    """No request is waiting to be woken."""
