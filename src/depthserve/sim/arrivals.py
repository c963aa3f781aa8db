"""The requests of a run: when each arrives, from which client, at which resolution level, drawn from the seed.

Arrivals are a Poisson process whose rate follows the scenario (steady, bursts, a diurnal curve),
drawn by thinning; they depend only on the scenario, its seed and the load, never on the policy, so
policies compared on one load see the same requests (common random numbers).
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate

from depthserve.sim.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request: its time (virtual seconds), client index and mix entry index."""

    at: float
    client: int
    mix: int


def rate_factor(scenario: Scenario, t: float) -> float:
    """The arrival rate at `t` relative to the mean."""
    arrivals = scenario.arrivals
    factor = 1.0
    if arrivals.process == "diurnal":
        factor = 1.0 + arrivals.amplitude * math.sin(2 * math.pi * t / arrivals.period_s)
    for burst in arrivals.bursts:
        if burst.at_s <= t < burst.at_s + burst.for_s:
            factor *= burst.factor
    return factor


def peak_factor(scenario: Scenario) -> float:
    """An upper bound of rate_factor over the run, for thinning."""
    arrivals = scenario.arrivals
    base = 1.0 + arrivals.amplitude if arrivals.process == "diurnal" else 1.0
    bursts = 1.0
    for burst in arrivals.bursts:
        bursts *= max(1.0, burst.factor)  # overlapping bursts multiply
    return base * bursts


def arrivals(scenario: Scenario, load: float) -> Iterator[Arrival]:
    """Every arrival of the run at `load`, in time order."""
    rng = random.Random(f"arrivals:{scenario.seed}:{load}")
    mean = scenario.rate_at(load)
    peak = mean * peak_factor(scenario)
    weights = list(accumulate(entry.weight for entry in scenario.mix))
    total = weights[-1]
    clients = scenario.arrivals.clients
    steady = scenario.arrivals.process != "diurnal" and not scenario.arrivals.bursts  # rate_factor is 1 throughout
    duration, last, draw, pick = scenario.duration_s, len(weights) - 1, rng.random, rng.randrange
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= duration:
            return
        accept = draw() * peak <= (mean if steady else mean * rate_factor(scenario, t))
        client = pick(clients)
        mix = bisect.bisect_right(weights, draw() * total)
        if accept:
            yield Arrival(t, client, min(mix, last))
