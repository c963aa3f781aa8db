"""Consistent hashing on a request key (a session header): the same key reaches the same backend while it stays."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from depthserve.balancer.common import HashTable, Options, count_for, stable_hash, with_drained
from depthserve.balancer.policies.maglev import TABLE_SIZE, build_maglev, is_prime, maglev_layout
from depthserve.balancer.policies.ring import VNODES, build_ring, ring_layout
from depthserve.balancer.types import RequestInfo, Snapshot, Table, View

CACHED_TABLES = 8  # a flapping backend alternates between two sets; keep a few tables instead of rebuilding
WEIGHT_STEP = 1.25  # weights snap to powers of this, relative to the largest, before a table is laid out
HYSTERESIS = 0.25  # in steps: a weight must pass its rounding boundary by this much (~6%) to change level


class ConsistentHash:
    """Maps a key to a slot of a ring or Maglev table; fallbacks are the distinct backends met walking on.

    The key is the `header` value (default x-session-id); without it, `fallback` decides: `client` hashes the
    client address (random if that is empty too), `random` starts at a random slot. Hashes are blake2b, never
    Python's salted `hash`, so every gateway process maps a key alike. Tables depend only on the set of ids and
    their weights snapped to levels (see `_settle`), never on snapshot order, and are rebuilt only when those
    change; a pick on the pool table it saw last costs a slot lookup and a walk to `limit` distinct backends.
    With `bounded_load` c >= 1 (0 = off), a backend may hold at most
    ceil(c * (total_in_flight + 1) * w / sum(w)) requests (ceil(c * (total + 1) / n) with equal weights;
    Mirrokni et al. 2018): busier ones are passed over to the next on the walk and listed after those under
    the cap. Drained backends (weight <= 0) come last.
    """

    name: ClassVar[str] = "consistent_hash"

    def __init__(
        self,
        header: str | None = "x-session-id",
        algorithm: str = "ring",
        vnodes: int = VNODES,
        table_size: int = TABLE_SIZE,
        bounded_load: float = 0.0,
        fallback: str = "client",
        seed: int | None = None,
    ) -> None:
        self._header = header.lower() if header else None
        self._algorithm = algorithm
        self._vnodes = vnodes
        self._table_size = table_size
        self._bound = bounded_load
        self._fallback = fallback
        self._rng = random.Random(seed)
        self._by_view: dict[tuple[tuple[str, float], ...], HashTable] = {}
        self._by_layout: dict[tuple[tuple[str, int], ...], HashTable] = {}
        self._settled: dict[tuple[str, ...], tuple[dict[str, int], HashTable]] = {}  # per id set: levels, table
        self._last: tuple[Table, HashTable] | None = None  # the pool table picked on last, and its hash table

    @classmethod
    def read_table_options(cls, parse: Options) -> dict[str, Any]:
        """Read the options shared with ip_hash, refusing or clamping as each says.

        `algorithm` ring (default) | maglev; `vnodes` ring points per backend of mean weight (default 128, clamped
        to 1..4096); `table_size` Maglev entries (default 65537, a prime in 11..655373, else refused);
        `bounded_load` 0 = off (default) or >= 1 (refused in between, clamped at 100).
        """
        table_size = parse.integer("table_size", TABLE_SIZE, 11, 655373)
        if not is_prime(table_size):
            raise ValueError(f"{cls.name}: option 'table_size' must be prime, got {table_size}")
        bound = parse.number("bounded_load", 0.0, 0.0, 100.0, clamp=True)
        if 0 < bound < 1:
            raise ValueError(f"{cls.name}: option 'bounded_load' must be 0 (off) or at least 1, got {bound:g}")
        return {
            "algorithm": parse.choice("algorithm", "ring", ("ring", "maglev")),
            "vnodes": parse.integer("vnodes", VNODES, 1, 4096, clamp=True),
            "table_size": table_size,
            "bounded_load": bound,
        }

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> ConsistentHash:
        """Read `header` (default x-session-id, lower-cased), `fallback` (client | random) and the table options."""
        parse = Options(cls.name, options)
        table = cls.read_table_options(parse)
        header = parse.text("header", "x-session-id").lower()
        fallback = parse.choice("fallback", "client", ("client", "random"))
        parse.done()
        return cls(header, fallback=fallback, seed=seed, **table)

    def key(self, request: RequestInfo) -> str | None:
        """Give the request's hash key, or None to start at a random slot."""
        if self._header is not None:
            value = request.headers.get(self._header)
            if value:
                return value
            if self._fallback == "random":
                return None
        return request.client or None

    def table(self, serving: Sequence[View], weights: Sequence[float]) -> HashTable:
        """Give the table for these backends and weights; a pick with the same view as before costs a dict lookup."""
        view = tuple(zip((b.id for b in serving), weights, strict=True))
        table = self._by_view.get(view)
        if table is None:
            table = self._settle(view)
            _remember(self._by_view, view, table)
        return table

    def _settle(self, view: tuple[tuple[str, float], ...]) -> HashTable:
        """Keep this backend set's table while each weight stays near its level; lay out and build anew otherwise.

        Levels are powers of WEIGHT_STEP relative to the largest weight, left only past a margin: measured
        ("auto") weights wobble by a few percent per report, and each wobble would otherwise rebuild the
        table (tens of milliseconds for Maglev) and move keys. Equal or static weights settle at once, so
        gateway processes agree; the table never depends on the snapshot's order.
        """
        ids = tuple(sorted(i for i, _ in view))
        top = max(w for _, w in view)
        steps = {i: math.log(w / top, WEIGHT_STEP) for i, w in view}
        settled = self._settled.get(ids)
        if settled is not None and all(abs(steps[i] - level) <= 0.5 + HYSTERESIS for i, level in settled[0].items()):
            return settled[1]
        levels = {i: round(step) for i, step in steps.items()}
        snapped = tuple((i, WEIGHT_STEP ** levels[i]) for i in ids)
        layout = ring_layout(snapped, self._vnodes) if self._algorithm == "ring" else maglev_layout(snapped)
        table = self._by_layout.get(layout)
        if table is None:
            table = build_ring(layout) if self._algorithm == "ring" else build_maglev(layout, self._table_size)
            _remember(self._by_layout, layout, table)
        _remember(self._settled, ids, (levels, table))
        self._by_view.clear()  # views cached against the old levels would now disagree
        return table

    def _table_for(self, pool: Table) -> HashTable:
        """The hash table of a pool table: the last one's at no cost, else looked up by its ids and weights."""
        if self._last is not None and self._last[0] is pool:
            return self._last[1]
        table = self.table(pool.serving, pool.weights)
        self._last = (pool, table)
        return table

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Walk the table from the key's slot, passing over backends at their cap when the load is bounded."""
        pool = snapshot.table
        if not pool.serving:
            return ()
        table = self._table_for(pool)
        key = self.key(request)
        slot = table.slot(stable_hash(key)) if key is not None else self._rng.randrange(len(table.owners))
        if self._bound:
            order = self._bounded(table.walk(slot), pool.serving, pool.weights)[: count_for(limit, len(pool.serving))]
        else:
            order = table.walk(slot, limit)
        return with_drained(order, pool, limit)

    def bound(self, snapshot: Snapshot, request: RequestInfo) -> str | None:
        """The backend the request's key lands on: its first pick, unless the load is bounded or it has no key."""
        pool = snapshot.table
        key = None if self._bound else self.key(request)
        if key is None or not pool.serving:
            return None
        table = self._table_for(pool)
        return table.walk(table.slot(stable_hash(key)), 1)[0]

    def _bounded(self, order: list[str], serving: Sequence[View], weights: Sequence[float]) -> list[str]:
        """Backends under their load cap first, in walk order (reads every in-flight count: O(N))."""
        in_flight = {b.id: max(b.in_flight, 0) for b in serving}
        share = {b.id: w for b, w in zip(serving, weights, strict=True)}
        scale = self._bound * (sum(in_flight.values()) + 1) / sum(weights)
        # The epsilon keeps float noise from lifting an exact whole-number cap by one.
        under = [i for i in order if in_flight[i] < math.ceil(scale * share[i] - 1e-9)]
        if len(under) == len(order):
            return order
        over = set(order).difference(under)
        return under + [i for i in order if i in over]


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= CACHED_TABLES:
        del cache[next(iter(cache))]
    cache[key] = value
