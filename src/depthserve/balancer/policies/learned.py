"""A balancer that learns each backend's speed online from the completions it sees (seed 2's learning balancer).

For every backend it keeps a model of what one more request costs there: the time per queued request,
the reply's latency divided by the backend's backlog when it answered, averaged with a time decay so
a backend that slows down (thermal throttling, a noisy neighbour, a slower model version) is noticed
within seconds and one that speeds up is trusted again. A pick samples a few backends and sends to
the one whose expected completion, (backlog + 1) x time per request, is lowest. It needs no offline
data: a backend it knows too little about is costed at the median of those it knows (so it gets tried),
and before it knows any it ranks like p2c. A bounded share of picks (`explore`) goes to the least
observed backend of the sample, so a recovered backend is seen again. Feedback arrives through
`observe`, which the gateway calls on the outcome path of every call.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from depthserve.balancer.common import Options, count_for, distinct_draws, outstanding, with_drained
from depthserve.balancer.types import RequestInfo, Snapshot, View


@dataclass
class _Model:
    """What is known of one backend: seconds per queued request, how many replies taught it, and when."""

    per_request_s: float = 0.0
    samples: int = 0
    updated_at: float = 0.0


class Learned:
    """Expected completion time from an online per-backend model; p2c while the model is cold."""

    name: ClassVar[str] = "learned"

    def __init__(
        self,
        choice_count: int = 4,
        half_life_s: float = 2.0,
        explore: float = 0.02,
        min_samples: int = 3,
        seed: int | None = None,
    ) -> None:
        self._choice_count = choice_count
        self._tau = half_life_s / math.log(2)
        self._explore = explore
        self._min_samples = min_samples
        self._rng = random.Random(seed)
        self._models: dict[str, _Model] = {}

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> Learned:
        """Read `choice_count` (2..64, default 4), `half_life_s` (0.1..600, default 2), `explore` (0..0.1,
        default 0.02: the share of picks spent learning), `min_samples` (1..100, default 3)."""
        parse = Options(cls.name, options)
        learned = cls(
            parse.integer("choice_count", 4, 2, 64),
            parse.number("half_life_s", 2.0, 0.1, 600.0),
            parse.number("explore", 0.02, 0.0, 0.1),
            parse.integer("min_samples", 3, 1, 100),
            seed,
        )
        parse.done()
        return learned

    def observe(self, backend: str, ok: bool, latency_ms: float, backlog: int, now: float) -> None:
        """Learn from one finished call: its latency and the backlog the backend had when it answered."""
        model = self._models.get(backend)
        if model is None:
            model = self._models[backend] = _Model(updated_at=now)
            if len(self._models) > 100_000:  # backends come and go: forget the oldest
                del self._models[next(iter(self._models))]
        if not ok:
            model.per_request_s = max(model.per_request_s * 2.0, 1e-3)  # a failure makes it look slow at once
            model.updated_at = now
            return
        sample = latency_ms / 1000.0 / (max(backlog, 0) + 1)
        if model.samples == 0:
            model.per_request_s = sample
        else:
            # Slower samples are taken four times faster than faster ones: a slowdown costs every request.
            tau = self._tau / 4 if sample > model.per_request_s else self._tau
            keep = math.exp(-max(0.0, now - model.updated_at) / tau) if tau > 0 else 0.0
            keep = min(keep, 0.9)  # each reply counts for at least a tenth
            model.per_request_s = keep * model.per_request_s + (1.0 - keep) * sample
        model.samples += 1
        model.updated_at = now

    def _backlog(self, view: View) -> float:
        """Requests ahead of a new one there: ours in flight, or what the backend reports, whichever is more."""
        reported = outstanding(view.load)
        in_flight = max(view.in_flight, 0)
        return float(in_flight if reported is None else max(in_flight, reported))

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Sample, cost each by expected completion, cheapest first."""
        table = snapshot.table
        serving = table.serving
        count = len(serving)
        if not count:
            return ()
        wanted = count_for(limit, count)
        size = count if limit is None else min(count, max(self._choice_count, wanted))
        sample = list(range(count)) if size == count else distinct_draws(self._rng, count, size)
        views = [serving[i] for i in sample]
        models = [self._models.get(view.id) for view in views]
        known = [m.per_request_s for m in models if m is not None and m.samples >= self._min_samples]
        backlog = [self._backlog(view) for view in views]
        if known:
            guess = statistics.median(known)  # a backend we know little about: tried at the typical speed
            cost = [
                (b + 1.0) * (m.per_request_s if m is not None and m.samples >= self._min_samples else guess)
                for b, m in zip(backlog, models, strict=True)
            ]
        else:  # nothing learned yet: p2c's rank, load per unit of weight
            weights = table.weights
            cost = [(b + 1.0) / weights[i] for b, i in zip(backlog, sample, strict=True)]
        order = sorted(range(len(sample)), key=lambda j: (cost[j], j))
        if self._explore and len(order) > 1 and self._rng.random() < self._explore:
            least = min(order, key=lambda j: _samples(models[j]))
            order.remove(least)
            order.insert(0, least)  # learning: the least observed backend of the sample goes first
        ids = [views[j].id for j in order[:wanted]]
        return with_drained(ids, table, limit) if table.drained else tuple(ids)


def _samples(model: _Model | None) -> int:
    """Replies a backend's model learned from (-1: never seen)."""
    return -1 if model is None else model.samples
