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

import heapq
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import TypeVar

from depthserve.handoff import Ticket

PRIORITIES = ("high", "normal", "low")  # served in this order; shed from the end
RANK = {name: rank for rank, name in enumerate(PRIORITIES)}
K = TypeVar("K")


@dataclass(eq=False)
class Waiter:
    """One queued request; its `ticket` is granted when a slot is handed to it."""

    model: str
    priority: str
    client: str
    ticket: Ticket
    lane: str = ""  # the backend a hash policy binds the request to ("": any of the model's)
    front: bool = False  # set when granted: its client was under its share, so the worker runs it first
    express: bool = False  # set when granted an express slot, past the workers' capacity


class WaitingRoom:
    """Waiters by priority, then by client; one line (FIFO) per client and priority."""

    def __init__(self, holding: Callable[[str], int] = lambda client: 0) -> None:
        # OrderedDict order is the turn order: a client served moves to the back.
        self._lines: dict[str, OrderedDict[str, deque[Waiter]]] = {name: OrderedDict() for name in PRIORITIES}
        self._size = 0
        self._per_client: dict[str, int] = {}
        self._per_model: dict[str, int] = {}  # waiters per model, the autoscaling signal's queue
        self._per_lane: dict[tuple[str, str], int] = {}  # so a hand-over asks each (model, lane) once, not each waiter
        self._bound: dict[tuple[str, str, str], int] = {}  # (model, lane, client) -> waiters, of bound requests only
        self._lane_clients: dict[tuple[str, str], int] = {}  # (model, lane) -> clients with a bound waiter there
        self._holding = holding  # client -> slots it holds now; its owner calls holding_changed on each change
        # Per priority, the turn order as stamps (client -> its stamp, rising as it moves to the back) and two
        # heaps, so neither the next client nor the longest line is found by a scan: (slots held, stamp, client)
        # and (-line length, stamp, client). An entry whose stamp, held count or length is no longer the
        # client's is stale, dropped when it reaches the top.
        self._turns: dict[str, dict[str, int]] = {name: {} for name in PRIORITIES}
        self._order: dict[str, list[tuple[int, int, str]]] = {name: [] for name in PRIORITIES}
        self._longest: dict[str, list[tuple[int, int, str]]] = {name: [] for name in PRIORITIES}
        self._stamps = count()

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

    def lane_line(self, model: str, lane: str, client: str) -> tuple[int, int]:
        """(the client's waiters bound to backend `lane`, the clients with one there): a bound request's line."""
        return self._bound.get((model, lane, client), 0), self._lane_clients.get((model, lane), 0)

    def clients(self) -> int:
        """Clients with at least one waiter."""
        return len(self._per_client)

    def push(self, waiter: Waiter) -> None:
        """Queue a waiter at the back of its client's line."""
        lines = self._lines[waiter.priority]
        line = lines.get(waiter.client)
        if line is None:
            line = lines[waiter.client] = deque()
            self._new_turn(waiter.priority, waiter.client)
        line.append(waiter)
        self._measure(waiter.priority, waiter.client)
        self._size += 1
        self._per_client[waiter.client] = self._per_client.get(waiter.client, 0) + 1
        self._per_model[waiter.model] = self._per_model.get(waiter.model, 0) + 1
        key = (waiter.model, waiter.lane)
        self._per_lane[key] = self._per_lane.get(key, 0) + 1
        if waiter.lane:
            bound = (waiter.model, waiter.lane, waiter.client)
            self._bound[bound] = self._bound.get(bound, 0) + 1
            if self._bound[bound] == 1:
                self._lane_clients[key] = self._lane_clients.get(key, 0) + 1

    def remove(self, waiter: Waiter) -> bool:
        """Take a waiter out wherever it stands; False when it is not queued (already served or shed)."""
        line = self._lines[waiter.priority].get(waiter.client)
        if line is None or waiter not in line:
            return False
        line.remove(waiter)
        self._dropped(waiter, line)
        return True

    def holding_changed(self, client: str) -> None:
        """Note that `client` now holds a different number of slots, so its place among the waiting moves."""
        if client not in self._per_client:
            return
        held = self._holding(client)
        for priority, turns in self._turns.items():
            turn = turns.get(client)
            if turn is not None:
                self._enter(priority, (held, turn, client))

    def next_to_serve(
        self, can_run: Callable[[str, str], bool], accept: Callable[[Waiter], bool] | None = None
    ) -> Waiter | None:
        """Take the next waiter whose model (and lane) can run, `can_run(model, lane)`: highest priority first, then
        the client holding the fewest slots, ties in turn; with `accept`, only if it accepts that waiter (else
        nobody is taken)."""
        runnable = {key for key in self._per_lane if can_run(*key)}
        if not runnable:
            return None  # the common case under overload: every waiting model is at its cap
        for priority, lines in self._lines.items():
            order, turns = self._order[priority], self._turns[priority]
            passed: list[tuple[int, int, str]] = []  # clients with nothing runnable, in their places again after
            chosen: Waiter | None = None
            while order and chosen is None:
                held, turn, client = entry = heapq.heappop(order)
                if turns.get(client) != turn or self._holding(client) != held:
                    continue  # stale: the client has since moved on, or holds another count
                passed.append(entry)
                chosen = next((w for w in lines[client] if (w.model, w.lane) in runnable), None)
            if chosen is None or (accept is not None and not accept(chosen)):
                for entry in passed:
                    heapq.heappush(order, entry)
                if chosen is None:
                    continue
                return None
            for entry in passed[:-1]:
                heapq.heappush(order, entry)
            line = lines[chosen.client]
            line.remove(chosen)
            if line:
                lines.move_to_end(chosen.client)  # its turn is used: among equals the other clients go first
                self._new_turn(priority, chosen.client)
            self._dropped(chosen, line)
            return chosen
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
            heaviest, line = self._longest_line(victim_priority)
            if victim_priority != priority:
                return line[-1]
            own = len(lines.get(client, ()))
            return line[-1] if heaviest != client and len(line) > own + 1 else None
        return None

    def _new_turn(self, priority: str, client: str) -> None:
        """Stamp the client's place at the back of the turn order and file it under its held count."""
        turn = next(self._stamps)
        self._turns[priority][client] = turn
        self._enter(priority, (self._holding(client), turn, client))

    def _enter(self, priority: str, entry: tuple[int, int, str]) -> None:
        """File a heap entry; rebuild the heap from live clients when stale entries outnumber them."""
        order = self._order[priority]
        heapq.heappush(order, entry)
        turns = self._turns[priority]
        if _bloated(order, turns):
            order[:] = [(self._holding(client), turn, client) for client, turn in turns.items()]
            heapq.heapify(order)

    def _measure(self, priority: str, client: str) -> None:
        """File the client's line length under its turn, after either changed; rebuild as `_enter` does."""
        longest, turns, lines = self._longest[priority], self._turns[priority], self._lines[priority]
        heapq.heappush(longest, (-len(lines[client]), turns[client], client))
        if _bloated(longest, turns):
            longest[:] = [(-len(lines[client]), turn, client) for client, turn in turns.items()]
            heapq.heapify(longest)

    def _longest_line(self, priority: str) -> tuple[str, deque[Waiter]]:
        """The longest line at a priority that has one, first in turn among equals (as `max` over the lines)."""
        longest, turns, lines = self._longest[priority], self._turns[priority], self._lines[priority]
        while True:
            length, turn, client = longest[0]
            if turns.get(client) == turn and len(lines[client]) == -length:
                return client, lines[client]
            heapq.heappop(longest)  # stale: the line has since grown, shrunk or moved on

    def _dropped(self, waiter: Waiter, line: deque[Waiter]) -> None:
        if line:
            self._measure(waiter.priority, waiter.client)
        else:
            del self._lines[waiter.priority][waiter.client]
            turns = self._turns[waiter.priority]
            del turns[waiter.client]
            if not turns:  # every entry left is stale
                self._order[waiter.priority].clear()
                self._longest[waiter.priority].clear()
        self._size -= 1
        _count_down(self._per_client, waiter.client)
        _count_down(self._per_model, waiter.model)
        _count_down(self._per_lane, (waiter.model, waiter.lane))
        if waiter.lane:
            bound = (waiter.model, waiter.lane, waiter.client)
            _count_down(self._bound, bound)
            if bound not in self._bound:
                _count_down(self._lane_clients, (waiter.model, waiter.lane))


def _bloated(heap: list[tuple[int, int, str]], turns: dict[str, int]) -> bool:
    """Whether stale entries outnumber live ones: a rebuild then costs O(1) a push, amortised."""
    return len(heap) > 2 * len(turns) + 16


def _count_down(counts: dict[K, int], key: K) -> None:
    """Decrement a count, dropping the key at zero so the dict holds only what is waiting."""
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
