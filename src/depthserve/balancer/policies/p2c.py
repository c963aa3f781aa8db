"""Power of two choices (Envoy least-request): sample a few backends, send to the least loaded of them."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from math import isfinite
from typing import Any, ClassVar

from depthserve.balancer.common import Options, count_for, distinct_draws, with_drained
from depthserve.balancer.types import RequestInfo, Snapshot, View


def choose(sample: Sequence[int], rank: Sequence[tuple[float, bool]]) -> int:
    """Return the sampled index with the best rank (lowest), the first sampled among equals."""
    return min(sample, key=rank.__getitem__)


class PowerOfTwoChoices:
    """Samples `choice_count` distinct backends uniformly and takes the one with the highest effective weight.

    Effective weight = weight / (load + 1) ** active_request_bias (Envoy's formula; with equal weights it is the
    fewest in flight), so the more loaded of the samples is never chosen. Load is the gateway's in-flight count;
    with `use_reports` it is max(in_flight, queue + running) from the worker's report: the report also counts
    other gateways' requests, and max() rather than a sum avoids counting ours twice. An unknown report counts
    as the busiest known one (of those sampled) and loses ties, so unknown never passes for idle. Sampling without
    replacement means a pool no larger than `choice_count` is a full scan. Fallbacks: the other samples, then
    (for a `limit` past `choice_count`) more random samples, by effective weight; a full order ranks the rest
    too. A pick reads only the backends it samples: O(limit). Drained backends (weight <= 0) come last.
    """

    name: ClassVar[str] = "p2c"

    def __init__(
        self, choice_count: int = 2, active_request_bias: float = 1.0, use_reports: bool = True, seed: int | None = None
    ) -> None:
        self._choice_count = choice_count
        self._bias = active_request_bias
        self._use_reports = use_reports
        self._rng = random.Random(seed)

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> PowerOfTwoChoices:
        """Read `choice_count` (2..100, default 2), `active_request_bias` (0..10, default 1.0), `use_reports`."""
        parse = Options(cls.name, options)
        choice_count = parse.integer("choice_count", 2, 2, 100)
        bias = parse.number("active_request_bias", 1.0, 0.0, 10.0)
        use_reports = parse.boolean("use_reports", True)
        parse.done()
        return cls(choice_count, bias, use_reports, seed)

    def _rank(
        self, serving: Sequence[View], weights: Sequence[float], sample: Sequence[int]
    ) -> list[tuple[float, bool]]:
        """Each sampled backend's rank, lowest best: (-effective weight, unknown), so unknown loses ties.

        Load is in flight, or the reported outstanding when larger; an unknown report counts as the busiest
        known one (of those sampled). One pass over the sample: it runs for every request.
        """
        loads: list[float] = []
        unknown: list[bool] = []
        worst = 0.0
        use_reports = self._use_reports
        for i in sample:
            backend = serving[i]
            in_flight = backend.in_flight
            reported: float | None = 0.0
            if use_reports:  # outstanding(backend.load), written out
                report = backend.load
                reported = None if report is None else float(report.queue + report.running)
                if reported is not None and not (reported >= 0 and isfinite(reported)):
                    reported = None
            if reported is None:
                unknown.append(True)
                loads.append(float(in_flight if in_flight > 0 else 0))
            else:
                unknown.append(False)
                if reported > worst:
                    worst = reported
                loads.append(float(max(in_flight, 0, reported)) if use_reports else float(max(in_flight, 0)))
        bias = self._bias
        rank = []
        for i, load, u in zip(sample, loads, unknown, strict=True):
            if u and worst > load:
                load = worst
            rank.append((-weights[i] / (load + 1.0) if bias == 1.0 else -weights[i] / (load + 1.0) ** bias, u))
        return rank

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Sample, choose the least loaded of the first `choice_count` samples, then list the fallbacks."""
        table = snapshot.table
        serving = table.serving
        count = len(serving)
        if not count:
            return ()
        choices = min(self._choice_count, count)
        wanted = count_for(limit, count)
        if limit is None:
            sample = self._rng.sample(range(count), choices)
            taken = set(sample)
            sample += [i for i in range(count) if i not in taken]  # ranked below; ties keep the pool's order
        else:  # the choices, then fallbacks drawn as more random backends: O(limit)
            sample = distinct_draws(self._rng, count, max(choices, wanted))
        rank = self._rank(serving, table.weights, sample)
        if choices == 2:  # the usual case, without a sort: the first sampled wins ties
            order = [1, 0] if rank[1] < rank[0] else [0, 1]
        else:
            best = choose(range(choices), rank)
            order = [best, *sorted((j for j in range(choices) if j != best), key=rank.__getitem__)]
        if len(sample) > choices:
            order += sorted(range(choices, len(sample)), key=rank.__getitem__)
        ids = [serving[sample[j]].id for j in order[:wanted]]
        return with_drained(ids, table, limit) if table.drained else tuple(ids)
