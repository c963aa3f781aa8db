"""Arrivals: drawn from the seed alone, at the offered rate, bursts multiplying it in their window."""

from __future__ import annotations

from depthserve.sim.arrivals import arrivals
from depthserve.sim.scenario import Scenario


def scenario(**fields: object) -> Scenario:
    return Scenario.model_validate({"duration_s": 100, "rate_rps": 200, **fields})


def test_the_same_seed_gives_the_same_requests_and_another_seed_others() -> None:
    first = list(arrivals(scenario(seed=4), 0.8))
    assert first == list(arrivals(scenario(seed=4), 0.8))
    assert first != list(arrivals(scenario(seed=5), 0.8))
    assert all(a.at <= b.at for a, b in zip(first, first[1:], strict=False))


def test_the_rate_is_the_offered_one_and_a_burst_multiplies_it() -> None:
    steady = list(arrivals(scenario(seed=1), 1.0))
    assert 19_000 < len(steady) < 21_000  # 200 a second for 100 s
    bursty = scenario(seed=1, arrivals={"bursts": [{"at_s": 40, "for_s": 10, "factor": 3}]})
    times = [a.at for a in arrivals(bursty, 1.0)]
    inside = sum(40 <= t < 50 for t in times)
    before = sum(30 <= t < 40 for t in times)
    assert 2.5 < inside / before < 3.5


def test_clients_and_mix_entries_are_drawn_within_range() -> None:
    mixed = scenario(seed=2, arrivals={"clients": 7}, mix=[{"level": 9, "weight": 3}, {"level": 0, "weight": 1}])
    drawn = list(arrivals(mixed, 0.5))
    assert {a.client for a in drawn} == set(range(7))
    share = sum(a.mix == 0 for a in drawn) / len(drawn)
    assert 0.7 < share < 0.8  # weights 3:1
