"""The waiting room's order (priority, then fewest slots held, ties in turn) and whom it sheds, as a scan finds;
a waiter runs when its model and lane (the backend a hash policy binds it to) can."""

from __future__ import annotations

import asyncio
import random
from collections import Counter, OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from depthserve.gateway.edge.waiting_room import PRIORITIES, Waiter, WaitingRoom
from depthserve.handoff import Ticket

CLIENTS = "abcdef"
MODELS = "xyz"
LANES = ("", "10.0.0.1:50051", "10.0.0.2:50051")  # "": any backend of the model


class ScanRoom:
    """The rules by a scan of every waiting client, as the room did them before it kept heaps: the reference."""

    def __init__(self) -> None:
        self.lines: dict[str, OrderedDict[str, list[Waiter]]] = {name: OrderedDict() for name in PRIORITIES}

    def push(self, waiter: Waiter) -> None:
        self.lines[waiter.priority].setdefault(waiter.client, []).append(waiter)

    def remove(self, waiter: Waiter) -> None:
        lines = self.lines[waiter.priority]
        lines[waiter.client].remove(waiter)
        if not lines[waiter.client]:
            del lines[waiter.client]

    def next_to_serve(self, runnable: set[tuple[str, str]], held: Counter[str]) -> Waiter | None:
        for lines in self.lines.values():
            best: tuple[int, str, Waiter] | None = None
            for client, line in lines.items():  # first in turn wins among equals: only a strictly lower count replaces
                waiter = next((w for w in line if (w.model, w.lane) in runnable), None)
                if waiter is not None and (best is None or held[client] < best[0]):
                    best = (held[client], client, waiter)
            if best is not None:
                _, client, waiter = best
                self.remove(waiter)
                if client in lines:
                    lines.move_to_end(client)
                return waiter
        return None

    def victim_for(self, priority: str, client: str) -> Waiter | None:
        for victim_priority in reversed(PRIORITIES):
            lines = self.lines[victim_priority]
            if not lines:
                if victim_priority == priority:
                    return None
                continue
            heaviest, line = max(lines.items(), key=lambda item: len(item[1]))  # the first longest in turn
            if victim_priority != priority:
                return line[-1]
            own = len(lines.get(client, ()))
            return line[-1] if heaviest != client and len(line) > own + 1 else None
        return None


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), clients=st.integers(1, 6), models=st.integers(1, 3))
def test_the_next_waiter_and_the_one_shed_are_those_a_scan_picks(seed: int, clients: int, models: int) -> None:
    asyncio.run(drive(random.Random(seed), CLIENTS[:clients], MODELS[:models]))  # a ticket needs a running loop


async def drive(rng: random.Random, clients: str, models: str) -> None:
    """Run one random sequence on the room and the reference, checking each waiter served or shed is the same."""
    held: Counter[str] = Counter()
    room = WaitingRoom(held.__getitem__)
    reference = ScanRoom()
    queued: list[Waiter] = []
    for _ in range(600):
        step = rng.choices(["push", "remove", "take", "release", "serve", "shed"], weights=[4, 1, 3, 3, 3, 2])[0]
        client = rng.choice(clients)
        if step == "push":
            waiter = Waiter(rng.choice(models), rng.choice(PRIORITIES), client, Ticket(), rng.choice(LANES))
            room.push(waiter)
            reference.push(waiter)
            queued.append(waiter)
        elif step == "remove" and queued:
            waiter = queued.pop(rng.randrange(len(queued)))
            assert room.remove(waiter)
            reference.remove(waiter)
            assert not room.remove(waiter)
        elif step == "take" or (step == "release" and held[client]):
            held[client] += 1 if step == "take" else -1
            room.holding_changed(client)
        elif step == "serve":
            runnable = {(model, lane) for model in models for lane in LANES if rng.random() < 0.6}
            expected = reference.next_to_serve(runnable, held)
            assert room.next_to_serve(lambda model, lane, keys=runnable: (model, lane) in keys) is expected
            if expected is not None:
                queued.remove(expected)
        elif step == "shed":  # as a newcomer to a full room: the victim, if any, leaves
            priority = rng.choice(PRIORITIES)
            expected = reference.victim_for(priority, client)
            assert room.victim_for(priority, client) is expected
            if expected is not None:
                assert room.remove(expected)
                reference.remove(expected)
                queued.remove(expected)
        assert len(room) == len(queued)
        model, lane = rng.choice(models), rng.choice(LANES[1:])  # a bound request's line, as admission reads it
        there = [w.client for w in queued if (w.model, w.lane) == (model, lane)]
        assert room.lane_line(model, lane, client) == (there.count(client), len(set(there)))
    while queued:  # drain: the whole remaining order agrees too
        expected = reference.next_to_serve({(model, lane) for model in MODELS for lane in LANES}, held)
        assert expected is not None and room.next_to_serve(lambda model, lane: True) is expected
        queued.remove(expected)
        held[expected.client] += 1
        room.holding_changed(expected.client)
    assert room.next_to_serve(lambda model, lane: True) is None


async def test_among_clients_holding_as_many_the_one_served_longest_ago_goes_first() -> None:
    held: Counter[str] = Counter({"a": 1, "b": 1, "c": 2})
    room = WaitingRoom(held.__getitem__)
    waiters = {name: [Waiter("m", "normal", name, Ticket()) for _ in range(2)] for name in "abc"}
    for client in "cab":
        for waiter in waiters[client]:
            room.push(waiter)
    assert room.next_to_serve(lambda model, lane: True) is waiters["a"][0]  # a and b hold 1; a came first
    held["a"] += 1
    room.holding_changed("a")
    assert room.next_to_serve(lambda model, lane: True) is waiters["b"][0]
    held["c"] -= 2
    room.holding_changed("c")  # now c holds least
    assert room.next_to_serve(lambda model, lane: True) is waiters["c"][0]
    held["c"] += 3
    held["b"] += 1
    room.holding_changed("c")
    room.holding_changed("b")
    assert room.next_to_serve(lambda model, lane: model != "m") is None  # nothing runnable: nobody is taken
    # a and b hold 2 each; a was served before b, so after the turns used since it comes first
    assert room.next_to_serve(lambda model, lane: True) is waiters["a"][1]
    assert room.next_to_serve(lambda model, lane: True) is waiters["b"][1]
    assert room.next_to_serve(lambda model, lane: True) is waiters["c"][1]
    assert len(room) == 0
