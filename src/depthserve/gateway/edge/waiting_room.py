"""The admission queue: strict priority between classes, and within one the client holding fewest slots.

Under overload one client sending five times the pool's capacity must not starve the others: each
client waits in its own line, and a freed slot goes to the waiting client that holds the fewest slots
now (ties in turn). That is max-min fairness of concurrency: a client asking less than an equal share
gets all it asks as soon as a slot frees, however long the heavy client's line; clients that all ask
more share equally. When the whole room is full, the newest waiter of the client with the longest
line makes way for a client with a shorter one, and the heavy client's newcomers are turned away at
the door instead.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from depthserve.handoff import Ticket

PRIORITIES = ("high", "normal", "low")  # served in this order; shed from the end
RANK = {name: rank for rank, name in enumerate(PRIORITIES)}


@dataclass(eq=False)
class Waiter:
    """One queued request; its `ticket` is granted when a slot is handed to it."""

    model: str
    priority: str
    client: str
    ticket: Ticket
    front: bool = False  # set when granted: its client was under its share, so the worker runs it first


class WaitingRoom:
    """Waiters by priority, then by client; one line (FIFO) per client and priority."""

    def __init__(self) -> None:
        # OrderedDict order is the turn order: a client served moves to the back.
        self._lines: dict[str, OrderedDict[str, deque[Waiter]]] = {name: OrderedDict() for name in PRIORITIES}
        self._size = 0
        self._per_client: dict[str, int] = {}
        self._per_model: dict[str, int] = {}  # so a hand-over asks each waiting model once, not each waiter

    def __len__(self) -> int:
        return self._size

    def counts(self) -> dict[str, int]:
        """Waiters per priority, for metrics."""
        return {name: sum(len(line) for line in lines.values()) for name, lines in self._lines.items()}

    def waiting(self, client: str) -> int:
        """Waiters of one client, all priorities."""
        return self._per_client.get(client, 0)

    def waiting_for(self, model: str) -> int:
        """Waiters of one model, all priorities (the autoscaling signal's queue)."""
        return self._per_model.get(model, 0)

    def clients(self) -> int:
        """Clients with at least one waiter."""
        return len(self._per_client)

    def push(self, waiter: Waiter) -> None:
        """Queue a waiter at the back of its client's line."""
        lines = self._lines[waiter.priority]
        line = lines.get(waiter.client)
        if line is None:
            line = lines[waiter.client] = deque()
        line.append(waiter)
        self._size += 1
        self._per_client[waiter.client] = self._per_client.get(waiter.client, 0) + 1
        self._per_model[waiter.model] = self._per_model.get(waiter.model, 0) + 1

    def remove(self, waiter: Waiter) -> bool:
        """Take a waiter out wherever it stands; False when it is not queued (already served or shed)."""
        line = self._lines[waiter.priority].get(waiter.client)
        if line is None or waiter not in line:
            return False
        line.remove(waiter)
        self._dropped(waiter, line)
        return True

    def next_to_serve(self, can_run: Callable[[str], bool], holding: Callable[[str], int]) -> Waiter | None:
        """Take the next waiter whose model can run: highest priority first, then the client `holding` the
        fewest slots, ties in turn."""
        runnable = {model for model in self._per_model if can_run(model)}
        if not runnable:
            return None  # the common case under overload: every waiting model is at its cap
        for lines in self._lines.values():
            best: tuple[int, str, Waiter] | None = None
            for client, line in lines.items():
                held = holding(client)
                if best is not None and held >= best[0]:
                    continue
                waiter = next((w for w in line if w.model in runnable), None)
                if waiter is not None:
                    best = (held, client, waiter)
                    if not held:
                        break  # none holds fewer, and among equals the first in turn goes: no need to look on
            if best is None:
                continue
            _, client, waiter = best
            line = lines[client]
            line.remove(waiter)
            if line:
                lines.move_to_end(client)  # its turn is used: among equals the other clients go first
            self._dropped(waiter, line)
            return waiter
        return None

    def victim_for(self, priority: str, client: str) -> Waiter | None:
        """Whom a newcomer may push out of a full room, or None when the newcomer itself is turned away.

        The newest waiter of the longest line at a lower priority; else, at the newcomer's own priority,
        the newest waiter of the longest line if that line is another client's and longer than its own.
        """
        for victim_priority in reversed(PRIORITIES):
            lines = self._lines[victim_priority]
            if not lines:
                if victim_priority == priority:
                    return None
                continue
            heaviest, line = max(lines.items(), key=lambda item: len(item[1]))
            if victim_priority != priority:
                return line[-1]
            own = len(lines.get(client, ()))
            return line[-1] if heaviest != client and len(line) > own + 1 else None
        return None

    def _dropped(self, waiter: Waiter, line: deque[Waiter]) -> None:
        if not line:
            del self._lines[waiter.priority][waiter.client]
        self._size -= 1
        _count_down(self._per_client, waiter.client)
        _count_down(self._per_model, waiter.model)


def _count_down(counts: dict[str, int], key: str) -> None:
    """Decrement a count, dropping the key at zero so the dict holds only what is waiting."""
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
