"""The door's pace: the release rate shared among the clients active lately, and forgetting idle ones."""

from __future__ import annotations

import pytest

from depthserve.gateway.edge.service_pace import ACTIVE_S, MAX_RETRY_AFTER_S, ServicePace
from depthserve.testing.fakes import FakeClock


def test_a_clients_wait_is_its_line_over_its_share_of_the_release_rate() -> None:
    clock = FakeClock()
    busy: set[str] = set()
    pace = ServicePace(clock, busy.__contains__)
    assert pace.expected_wait("a", waiting=0, holding=False) is None  # no releases yet: nothing to say
    for client in "ab" * 5:  # two clients served, ten releases over 0.9 s: 10 a second
        pace.first_slot(client)
        clock.advance(0.1)
        pace.released(client, clock())
    assert pace.expected_wait("a", waiting=1, holding=False) == pytest.approx(2 * 2 / 10)
    assert pace.expected_wait("c", waiting=0, holding=False) == pytest.approx(3 / 10)  # a newcomer shares too
    assert pace.retry_after(backlog=1) == 1.0 and pace.retry_after(backlog=10**6) == MAX_RETRY_AFTER_S


def test_clients_idle_for_a_while_are_forgotten_unless_they_hold_or_wait() -> None:
    clock = FakeClock()
    busy = {"b"}
    pace = ServicePace(clock, busy.__contains__)
    for client in "abab":
        pace.first_slot(client)
        clock.advance(0.01)
        pace.released(client, clock())
    clock.advance(ACTIVE_S * 2)
    assert pace.prune(clock()) and not pace.prune(clock())  # looked once; not again within ACTIVE_S / 2
    assert pace.expected_wait("x", waiting=0, holding=False) == pytest.approx(2 / (3 / 0.03))  # b and x remain
