"""Each model pool's eligible backends as a balancer Table, rebuilt on change instead of on every request.

A table changes when membership, a health flag, an operator's drain, a weight or a slow-start step
changes; time-driven changes (an ejection running out, the next slow-start step, measured weights
going stale) are due at a known instant, so each table carries the moment it must be rebuilt. The
views in a table read the backends' live counters (in flight, latency, load report) at the instant
of the pick, which the pool sets once per request: a request costs O(k) policy work, not O(N).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from depthserve.balancer.types import Table
from depthserve.gateway.upstream.backend import Backend
from depthserve.protocol.load_report import LoadReport

SLOW_START_FLOOR = 0.1  # a backend in slow start gets at least this share of its weight
SLOW_START_STEPS = 10  # a ramp moves in this many steps, each one rebuilding the table
WEIGHT_REFRESH_S = 1.0  # measured ("auto") weights are re-read at least this often


class Instant:
    """The moment of the current pick, shared by every view of a pool (one event loop, picks are synchronous)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0


class LiveView:
    """A backend as a policy sees it: a weight fixed when the table was built, live counters read at the pick."""

    __slots__ = ("id", "weight", "_backend", "_stats", "_instant", "_max_age_s")

    def __init__(self, backend: Backend, weight: float, instant: Instant, max_age_s: float) -> None:
        self.id = backend.address
        self.weight = weight
        self._backend = backend
        self._stats = backend.stats  # a backend keeps its stats object for life: one hop less per read
        self._instant = instant
        self._max_age_s = max_age_s

    @property
    def in_flight(self) -> int:
        """Calls the gateway sent there and has not seen end."""
        return self._stats.in_flight

    @property
    def ewma_ms(self) -> float:
        """EWMA of its successful calls' latency."""
        return self._stats.ewma_ms

    @property
    def peak_ewma_ms(self) -> float:
        """Peak-EWMA latency, decayed to the moment of the pick."""
        return self._stats.peak_at(self._instant.now)

    @property
    def error_rate(self) -> float:
        """EWMA of its failures."""
        return self._stats.error_rate

    @property
    def load(self) -> LoadReport | None:
        """Its last load report if still fresh at the moment of the pick, else unknown (Backend.fresh_load, inline)."""
        backend = self._backend
        return backend.load if self._instant.now - backend.load_at <= self._max_age_s else None

    @property
    def backend(self) -> Backend:
        """The backend behind the view, for the pool's own filters."""
        return self._backend


@dataclass(frozen=True)
class PoolEntry:
    """A built table, the versions ready in it, and until when it holds."""

    table: Table
    versions: frozenset[str]
    generation: int
    valid_until: float


@dataclass(frozen=True)
class Members:
    """Every backend tagged with a model, whatever its state: whether the model and a version are known at all."""

    count: int
    versions: frozenset[str]  # the versions its backends are tagged with
    any_version: bool  # some backend serves every version of it
    generation: int

    def serves(self, version: str) -> bool:
        """Whether some backend of the model serves `version`."""
        return self.any_version or version in self.versions


def measured_weights(backends: Iterable[Backend], now: float, max_age_s: float) -> dict[str, float]:
    """Each backend's weight: static, or measured capacity (median of the known ones when its own is unknown)."""
    backends = list(backends)
    measured = {}
    for backend in backends:
        load = backend.fresh_load(now, max_age_s)
        if backend.spec.auto and load is not None and load.capacity_rps > 0:
            measured[backend.address] = load.capacity_rps
    fallback = statistics.median(measured.values()) if measured else 1.0
    return {
        b.address: b.spec.weight if b.spec.weight is not None else measured.get(b.address, fallback) for b in backends
    }


def eligible(backends: Iterable[Backend], now: float, panic_percent: float) -> list[Backend]:
    """Backends that may take traffic: healthy and accepting, and not ejected unless too many are (panic)."""
    available = [b for b in backends if b.health.healthy and b.accepting]
    unejected = [b for b in available if not b.health.ejected(now)]
    if available and len(unejected) * 100 < len(available) * panic_percent:
        return available  # panic: too many ejected; spreading load beats overloading the rest
    return unejected


def slow_start(backend: Backend, now: float, window_s: float) -> tuple[float, float]:
    """A newly ready backend's share of its weight now, and when the next step is due.

    Steps fall on a grid shared by every backend (multiples of window / SLOW_START_STEPS on the clock), so
    a thousand backends ramping at once rebuild their pool's table once per step, not once per backend.
    """
    if window_s <= 0:
        return 1.0, math.inf
    elapsed = now - backend.health.ready_since
    if elapsed >= window_s:
        return 1.0, math.inf
    tick = window_s / SLOW_START_STEPS
    share = max(SLOW_START_FLOOR, math.floor(max(0.0, elapsed) / tick) / SLOW_START_STEPS)
    return share, (math.floor(now / tick) + 1) * tick


class PoolTables:
    """Per (model, version): the last table built, reused until the pool changes or its time runs out."""

    def __init__(
        self,
        backends: Callable[[], Sequence[Backend]],
        max_age_s: float,
        panic_percent: float,
        slow_start_s: float,
    ) -> None:
        self._backends = backends
        self._max_age_s = max_age_s
        self._panic_percent = panic_percent
        self._slow_start_s = slow_start_s
        self.instant = Instant()
        self.generation = 0  # bumped on every change that may alter a table
        self._entries: dict[tuple[str | None, str | None], PoolEntry] = {}
        self._members: dict[str, Members] = {}
        self.builds = 0  # tables built since start, for tests and benchmarks

    def changed(self) -> None:
        """Something tables depend on changed: rebuild each on its next use."""
        self.generation += 1
        if len(self._entries) > 256 or len(self._members) > 256:  # model names come from requests: keep a few
            self._entries.clear()
            self._members.clear()

    def members(self, model: str) -> Members:
        """Who serves `model` at all (leaving backends too), rebuilt only when membership or tags change."""
        known = self._members.get(model)
        if known is None or known.generation != self.generation:
            tagged = [b.spec for b in self._backends() if b.spec.serves(model)]
            versions = frozenset(spec.version for spec in tagged if spec.version)
            known = Members(len(tagged), versions, any(spec.version is None for spec in tagged), self.generation)
            self._members[model] = known
        return known

    def entry(self, model: str | None, version: str | None, now: float) -> PoolEntry:
        """The pool's table as of `now`, built anew only when stale."""
        key = (model, version)
        entry = self._entries.get(key)
        if entry is None or entry.generation != self.generation or now >= entry.valid_until:
            entry = self._build(model, version, now)
            self._entries[key] = entry
        return entry

    def _build(self, model: str | None, version: str | None, now: float) -> PoolEntry:
        everyone = self._backends()
        members = [b for b in everyone if model is None or b.spec.serves(model, version)]
        chosen = eligible(members, now, self._panic_percent)
        valid_until = math.inf
        for backend in members:
            if backend.health.ejected(now):
                valid_until = min(valid_until, backend.health.ejected_until)
        weights = measured_weights(everyone, now, self._max_age_s) if chosen else {}
        if any(b.spec.auto for b in chosen):
            valid_until = min(valid_until, now + WEIGHT_REFRESH_S)
        views = []
        for backend in chosen:
            share, next_step = slow_start(backend, now, self._slow_start_s)
            valid_until = min(valid_until, next_step)
            views.append(LiveView(backend, weights[backend.address] * share, self.instant, self._max_age_s))
        self.builds += 1
        versions = frozenset(b.spec.version for b in chosen if b.spec.version)
        return PoolEntry(Table(views), versions, self.generation, valid_until)
