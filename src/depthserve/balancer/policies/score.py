"""Weighted composite score (like the inference gateway's scorers): combine queue, latency and GPU state."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from depthserve.balancer.common import (
    Options,
    Rotation,
    count_for,
    distinct_draws,
    exclude_overloaded,
    fill_median,
    fill_worst,
    gpu_util,
    latency_ms,
    mem_fraction,
    min_max,
    outstanding,
    with_drained,
)
from depthserve.balancer.types import RequestInfo, Snapshot, Table, View


class Score:
    """Orders backends by a weighted sum of min-max normalised components, lowest (best) first.

    Components: `queue` (reported queue + running, per unit of weight), `in_flight` (the gateway's, per unit of
    weight), `latency` (expected wait: peak-EWMA, else EWMA, x (in_flight + 1); no sample = median of known),
    `gpu_util`, `gpu_mem` (used/total). Latency is scaled by the backlog because on mixed hardware a fast
    backend with a short queue still beats an idle slow one, and a busy fast one should not look idle.
    Each is normalised across the candidates, so 0 is the best candidate and 1 the worst. A backend whose
    report shows temp_c > max_temp_c or memory fraction > max_mem_fraction is left out, unless every backend
    is (panic mode: serve from all rather than refuse). One above hot_util utilisation is de-weighted: it gets
    hot_penalty x (sum of component weights) added, i.e. it must beat the others by that share of the range.
    An unknown report (None) counts as the worst known value of each report-based component and loses ties,
    so unknown never passes for idle; it is never excluded, since nothing is known to be wrong with it.
    Remaining ties rotate. Drained backends (weight <= 0) come last. Scores are relative, so every
    candidate is read on each pick (O(N)) unless `sample_size` n >= 2 is set: then a pick for a few
    candidates scores n random serving backends only, and costs the same whatever the pool's size.
    """

    name: ClassVar[str] = "score"

    def __init__(
        self,
        w_queue: float = 2.0,
        w_in_flight: float = 1.0,
        w_latency: float = 1.0,
        w_gpu_util: float = 1.0,
        w_gpu_mem: float = 1.0,
        max_temp_c: float = 85.0,
        max_mem_fraction: float = 0.95,
        hot_util: float = 0.8,
        hot_penalty: float = 0.1,
        sample_size: int = 0,
        seed: int | None = None,
    ) -> None:
        self._weights = (w_queue, w_in_flight, w_latency, w_gpu_util, w_gpu_mem)
        self._max_temp_c = max_temp_c
        self._max_mem_fraction = max_mem_fraction
        self._hot_util = hot_util
        self._hot_penalty = hot_penalty * sum(self._weights)
        self._rotation = Rotation()
        self._sample_size = sample_size
        self._rng = random.Random(seed)

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> Score:
        """Read component weights (>= 0, refused if negative, clamped at 1000) and limits (clamped to range)."""
        parse = Options(cls.name, options)
        weights = {
            key: parse.number(key, default, 0.0, float("inf"))
            for key, default in (
                ("w_queue", 2.0),
                ("w_in_flight", 1.0),
                ("w_latency", 1.0),
                ("w_gpu_util", 1.0),
                ("w_gpu_mem", 1.0),
            )
        }
        score = cls(
            **{key: min(value, 1000.0) for key, value in weights.items()},
            max_temp_c=parse.number("max_temp_c", 85.0, 0.0, 200.0, clamp=True),
            max_mem_fraction=parse.number("max_mem_fraction", 0.95, 0.0, 1.0, clamp=True),
            hot_util=parse.number("hot_util", 0.8, 0.0, 1.0, clamp=True),
            hot_penalty=parse.number("hot_penalty", 0.1, 0.0, 10.0, clamp=True),
            sample_size=_sample_size(parse),
            seed=seed,
        )
        parse.done()
        return score

    def scores(self, backends: Sequence[View], weights: Sequence[float]) -> list[float]:
        """Score candidates (lower is better); exposed so tests and the simulator can see why an order came out."""
        loads = [b.load for b in backends]
        components = (
            [q / w for q, w in zip(fill_worst([outstanding(load) for load in loads]), weights, strict=True)],
            [max(b.in_flight, 0) / w for b, w in zip(backends, weights, strict=True)],
            [
                lat * (max(b.in_flight, 0) + 1)
                for lat, b in zip(fill_median([latency_ms(b) for b in backends]), backends, strict=True)
            ],
            fill_worst([gpu_util(load) for load in loads]),
            fill_worst([mem_fraction(load) for load in loads]),
        )
        total = [0.0] * len(backends)
        for weight, values in zip(self._weights, components, strict=True):
            if weight:
                total = [t + weight * v for t, v in zip(total, min_max(values), strict=True)]
        for i, load in enumerate(loads):
            util = gpu_util(load)
            if util is not None and util > self._hot_util:
                total[i] += self._hot_penalty
        return total

    def _candidates(self, table: Table, limit: int | None) -> Table:
        """The backends scored on this pick: all of them, or a random sample of `sample_size` serving ones."""
        count = len(table.serving)
        size = max(self._sample_size, limit or 0)
        if not self._sample_size or limit is None or count <= size:
            return table
        return Table([table.serving[i] for i in distinct_draws(self._rng, count, size)])

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Leave out overloaded backends, score the rest and sort."""
        pool = self._candidates(snapshot.table, limit)
        kept = exclude_overloaded(pool.backends, self._max_temp_c, self._max_mem_fraction)
        if pool is not snapshot.table and len(kept) < min(limit or 0, len(pool.backends)):
            pool = snapshot.table  # the sample was mostly overloaded: score them all rather than offer fewer
            kept = exclude_overloaded(pool.backends, self._max_temp_c, self._max_mem_fraction)
        table = Table(kept) if len(kept) < len(pool.backends) else pool
        serving, weights = table.serving, table.weights
        count = len(serving)
        if not count:
            return ()
        start = self._rotation.start(count)
        total = self.scores(serving, weights)
        order = sorted(range(count), key=lambda i: (total[i], serving[i].load is None, (i - start) % count))
        ids = [serving[i].id for i in order[: count_for(limit, count)]]
        return with_drained(ids, table if pool is snapshot.table else snapshot.table, limit)


def _sample_size(parse: Options) -> int:
    """Read `sample_size`: 0 (every candidate scored, the default) or 2..1000."""
    size = parse.integer("sample_size", 0, 0, 1000)
    if size == 1:
        raise ValueError("score: option 'sample_size' must be 0 (score all) or at least 2, got 1")
    return size
