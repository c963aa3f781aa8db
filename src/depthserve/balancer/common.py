"""Machinery every policy shares: options, weights and draining, load reads, hot-GPU exclusion, stable hashing."""

from __future__ import annotations

import hashlib
import heapq
import math
import random
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any

from depthserve.balancer.types import MAX_WEIGHT, MIN_WEIGHT, Table, View
from depthserve.protocol.load_report import LoadReport

FULL_SCAN = 8  # policies that rank by cost scan pools up to this size, and a random sample of this size beyond


class Options:
    """Reads one policy's options, each with its default and range; `done` names any option nobody read."""

    def __init__(self, policy: str, options: Mapping[str, Any]) -> None:
        self._policy = policy
        self._options = dict(options)
        self._known: list[str] = []

    def _get(self, key: str) -> Any:
        self._known.append(key)
        return self._options.get(key)

    def _fail(self, key: str, message: str) -> ValueError:
        return ValueError(f"{self._policy}: option {key!r} {message}")

    def number(self, key: str, default: float, low: float, high: float, *, clamp: bool = False) -> float:
        """Read a finite number in [low, high]; out of range it is clamped if `clamp`, else refused."""
        raw = self._get(key)
        if raw is None:
            return default
        try:
            if isinstance(raw, bool):
                raise TypeError
            value = float(raw)
        except (TypeError, ValueError):
            raise self._fail(key, f"must be a number, got {raw!r}") from None
        if math.isnan(value):
            raise self._fail(key, "must be a number, got NaN")
        if low <= value <= high:
            return value
        if clamp:
            return min(max(value, low), high)
        raise self._fail(key, f"must lie in [{low:g}, {high:g}], got {value:g}")

    def integer(self, key: str, default: int, low: int, high: int, *, clamp: bool = False) -> int:
        """Read a whole number in [low, high], clamped or refused like `number`."""
        value = self.number(key, default, -math.inf, math.inf)
        if math.isfinite(value) and value != int(value):
            raise self._fail(key, f"must be a whole number, got {value:g}")
        if not low <= value <= high and not clamp:
            raise self._fail(key, f"must lie in [{low}, {high}], got {value:g}")
        return int(min(max(value, low), high))

    def boolean(self, key: str, default: bool) -> bool:
        """Read a flag, accepting true/false and their usual spellings in text."""
        raw = self._get(key)
        if raw is None:
            return default
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise self._fail(key, f"must be true or false, got {raw!r}")

    def choice(self, key: str, default: str, choices: Sequence[str]) -> str:
        """Read one of a few fixed words."""
        raw = self._get(key)
        if raw is None:
            return default
        if raw not in choices:
            raise self._fail(key, f"must be one of {', '.join(choices)}, got {raw!r}")
        return str(raw)

    def text(self, key: str, default: str) -> str:
        """Read a non-empty string."""
        raw = self._get(key)
        if raw is None:
            return default
        if not isinstance(raw, str) or not raw.strip():
            raise self._fail(key, f"must be a non-empty string, got {raw!r}")
        return raw.strip()

    def done(self) -> None:
        """Refuse the options nobody read, naming them, so a typo never silently means the default."""
        unknown = sorted(set(self._options) - set(self._known))
        if unknown:
            known = ", ".join(self._known) or "none"
            raise ValueError(f"{self._policy}: unknown option(s) {', '.join(map(repr, unknown))}; known: {known}")


def weight_of(backend: View) -> float:
    """Give a usable weight, clamped to [MIN_WEIGHT, MAX_WEIGHT], or 0.0 for a drained one (weight <= 0 or NaN)."""
    weight = backend.weight
    return min(max(weight, MIN_WEIGHT), MAX_WEIGHT) if weight > 0 else 0.0


def split_drained(backends: Sequence[View]) -> tuple[list[View], list[float], list[View]]:
    """Split into serving backends with their weights and drained ones; if all are drained, all serve at weight 1.

    Weight <= 0 means "drain" (as in HAProxy); policies read the same split from their snapshot's Table,
    made once per pool change.
    """
    table = Table(backends)
    return list(table.serving), list(table.weights), list(table.drained)


def count_for(limit: int | None, count: int) -> int:
    """How many of `count` candidates a pick with `limit` lists (None: all)."""
    return count if limit is None else max(0, min(limit, count))


def with_drained(ids: Sequence[str], table: Table, limit: int | None) -> tuple[str, ...]:
    """The serving picks, then drained backends as last-resort fallbacks, `limit` ids in all."""
    room = count_for(limit, len(ids) + len(table.drained)) - len(ids)
    if room <= 0:
        return tuple(ids[: count_for(limit, len(ids))])
    return (*ids, *(b.id for b in table.drained[:room]))


def distinct_draws(rng: random.Random, count: int, wanted: int) -> list[int]:
    """`wanted` distinct indices below `count`, uniformly, in draw order.

    From a large pool they are drawn with repeats and the repeats dropped, several times cheaper than
    `Random.sample`; from a small one (where repeats would be common) `Random.sample` draws them.
    """
    if wanted * 4 > count:
        return rng.sample(range(count), min(wanted, count))
    draw = rng.random
    chosen: dict[int, None] = {}
    for _ in range(wanted):
        chosen[int(draw() * count)] = None
    while len(chosen) < wanted:
        chosen[int(draw() * count)] = None
    return list(chosen)


def scan_or_sample(rng: random.Random, count: int, limit: int | None) -> Sequence[int]:
    """Indices a cost-ranking policy looks at: every one for a small pool or a full order, else a random sample.

    A sample of FULL_SCAN keeps a pick's cost flat as the pool grows (the best of a few random choices is
    nearly as good as the best of all: Mitzenmacher's power of d choices).
    """
    if limit is None or count <= FULL_SCAN:
        return range(count)
    return distinct_draws(rng, count, max(FULL_SCAN, limit))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) and value >= 0 else None


def outstanding(load: LoadReport | None) -> float | None:
    """Requests waiting or running at the worker, or None when unknown (no report, stale, or garbage)."""
    if load is None:
        return None
    return _finite(float(load.queue + load.running))


def gpu_util(load: LoadReport | None) -> float | None:
    """Reported accelerator utilisation 0..1, or None when unknown."""
    return None if load is None else _finite(load.gpu_util)


def mem_fraction(load: LoadReport | None) -> float | None:
    """Fraction of accelerator memory in use, or None when unknown (no report or no total reported)."""
    if load is None or load.mem_total <= 0:
        return None
    return _finite(load.mem_used / load.mem_total)


def latency_ms(backend: View, metric: str = "peak_ewma") -> float:
    """Give the backend's latency estimate, peak-EWMA falling back to EWMA; 0.0 means no sample yet."""
    value = backend.peak_ewma_ms if metric == "peak_ewma" else 0.0
    if not (math.isfinite(value) and value > 0):
        value = backend.ewma_ms
    return value if math.isfinite(value) and value > 0 else 0.0


def fill_worst(values: Sequence[float | None]) -> list[float]:
    """Replace unknown values by the worst (largest) known one, so unknown never looks idle; 0 if none is known."""
    known = [v for v in values if v is not None]
    worst = max(known) if known else 0.0
    return [worst if v is None else v for v in values]


def fill_median(values: Sequence[float]) -> list[float]:
    """Replace missing latencies (0.0) by the median of known ones: optimistic enough that new backends get tried."""
    known = sorted(v for v in values if v > 0)
    if not known:
        return [1.0] * len(values)
    middle = len(known) // 2
    guess = known[middle] if len(known) % 2 else (known[middle - 1] + known[middle]) / 2
    return [v if v > 0 else guess for v in values]


def min_max(values: Sequence[float]) -> list[float]:
    """Normalise to 0..1 across the candidates (0 = best when lower is better); all equal gives all 0."""
    low, high = min(values), max(values)
    span = high - low
    return [(v - low) / span for v in values] if span > 0 else [0.0] * len(values)


def overloaded(load: LoadReport | None, max_temp_c: float, max_mem_fraction: float) -> bool:
    """Say whether a known report shows the GPU too hot or its memory too full; unknown is not overloaded."""
    if load is None:
        return False
    memory = mem_fraction(load)
    too_hot = load.temp_c is not None and load.temp_c > max_temp_c
    return too_hot or (memory is not None and memory > max_mem_fraction)


def exclude_overloaded(backends: Sequence[View], max_temp_c: float, max_mem_fraction: float) -> list[View]:
    """Drop overloaded backends, or keep them all when every one is overloaded (panic mode: serve, don't refuse)."""
    kept = [b for b in backends if not overloaded(b.load, max_temp_c, max_mem_fraction)]
    return kept or list(backends)


def stable_hash(text: str) -> int:
    """Hash text to 64 bits identically in every process (Python's `hash` is salted per process)."""
    data = text.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class HashTable:
    """An immutable sequence of owner ids, walked from a key's slot; both the ring and Maglev build one."""

    def __init__(self, ids: Sequence[str], owners: Sequence[str], points: Sequence[int] | None = None) -> None:
        self.ids = tuple(ids)  # every backend the table was built for, even one that won no slot
        self.owners = tuple(owners)
        self.points = tuple(points) if points is not None else None  # ring: sorted positions; Maglev: None

    def slot(self, key_hash: int) -> int:
        """Find the slot a key hash lands in: the next ring point clockwise, or the Maglev entry."""
        if self.points is None:
            return key_hash % len(self.owners)
        return bisect_left(self.points, key_hash) % len(self.owners)

    def walk(self, slot: int, limit: int | None = None) -> list[str]:
        """List `limit` backends (None: every one) once each: distinct owners in table order from `slot`, then
        any that won no slot."""
        owners, count = self.owners, len(self.owners)
        wanted = len(self.ids) if limit is None else min(limit, len(self.ids))
        order: list[str] = []
        seen: set[str] = set()
        for step in range(count):
            if len(order) >= wanted:
                return order
            owner = owners[(slot + step) % count]
            if owner not in seen:
                seen.add(owner)
                order.append(owner)
        order.extend(i for i in self.ids if i not in seen)
        return order[:wanted]


class Rotation:
    """A start index that moves on by one each pick, so backends tied on cost take turns."""

    def __init__(self) -> None:
        self._turn = 0

    def start(self, count: int) -> int:
        """Give this pick's starting index among `count` backends and advance."""
        start = self._turn % count
        self._turn = start + 1
        return start

    def cheapest_first(
        self,
        table: Table,
        indices: Sequence[int],
        cost: Sequence[float],
        limit: int | None,
    ) -> tuple[str, ...]:
        """Serving backends at `indices` (costed alike) by cost, ties taking turns, then the drained ones."""
        count = len(indices)
        if not count:
            return ()
        start = self.start(count)
        keys = [(cost[i], (i - start) % count, i) for i in range(count)]
        wanted = count_for(limit, count)
        order = heapq.nsmallest(wanted, keys) if wanted < count // 2 else sorted(keys)[:wanted]
        serving = table.serving
        return with_drained([serving[indices[i]].id for _, _, i in order], table, limit)
