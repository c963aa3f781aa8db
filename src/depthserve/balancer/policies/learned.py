"""A balancer that learns each backend's latency online from the completions it sees (seed 2's learning balancer).

For every backend it fits, by time-decayed least squares, latency = a + b x backlog, the backlog
being the requests ahead when the request was sent (recorded at the pick). The slope is what one
more queued request costs there, measured, heavy tails included: a backend with long, variable
service times costs more per queued request than its mean says, which is why plain
shortest-expected-delay overloads the fastest backends. The decay (`half_life_s`) lets a backend
that slows down (thermal throttling, a noisy neighbour, a slower model version) be noticed within
seconds, and slower replies count four times faster than quicker ones. A pick samples
`choice_count` backends and sends to the lowest predicted latency. It needs no offline data: a
backend it knows too little about is predicted at the median of those it knows (so it gets tried),
and before it knows any it ranks like p2c. A bounded share of picks (`explore`) goes to the least
observed backend of the sample. Feedback arrives through `observe`, on the outcome path of every call.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from depthserve.balancer.common import Options, count_for, distinct_draws, outstanding, with_drained
from depthserve.balancer.types import RequestInfo, Snapshot, View

RIDGE = 1.0  # pull of the slope towards the intercept (latency = a x (backlog + 1)) while the data says little


@dataclass
class _Model:
    """Decayed sums of one backend's (backlog, latency) samples, and the fit they give."""

    weight: float = 0.0
    backlog: float = 0.0
    backlog_sq: float = 0.0
    latency: float = 0.0
    cross: float = 0.0
    intercept_s: float = 0.0
    slope_s: float = 0.0
    samples: int = 0
    updated_at: float = 0.0
    sent: deque[float] = field(default_factory=lambda: deque(maxlen=4096))  # backlogs at send, oldest first

    def add(self, backlog: float, latency_s: float, keep: float) -> None:
        """Decay the sums by `keep`, add one sample, and refit."""
        self.weight = self.weight * keep + 1.0
        self.backlog = self.backlog * keep + backlog
        self.backlog_sq = self.backlog_sq * keep + backlog * backlog
        self.latency = self.latency * keep + latency_s
        self.cross = self.cross * keep + backlog * latency_s
        self.samples += 1
        # Least squares of latency = a + s x backlog, with a ridge pulling s towards a: 2x2 normal equations.
        n, sb, sbb, sl, sbl = self.weight, self.backlog, self.backlog_sq, self.latency, self.cross
        a11, a12, a22 = n + RIDGE, sb - RIDGE, sbb + RIDGE
        det = a11 * a22 - a12 * a12
        if det <= 1e-12:
            self.intercept_s, self.slope_s = sl / n, sl / n
            return
        self.intercept_s = max(0.0, (a22 * sl - a12 * sbl) / det)
        self.slope_s = max(0.0, (a11 * sbl - a12 * sl) / det)

    def predict(self, backlog: float) -> float:
        """Expected latency of a request sent now behind `backlog` others."""
        return self.intercept_s + self.slope_s * backlog


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
        """Learn from one finished call: its latency and the backlog it was sent behind (from the pick)."""
        model = self._models.get(backend)
        if model is None:
            model = self._model(backend, now)
        sent_behind = model.sent.popleft() if model.sent else float(max(backlog, 0))
        if not ok:  # a failure makes it look slow at once
            model.intercept_s = max(model.intercept_s * 2.0, 1e-3)
            model.updated_at = now
            return
        sample = latency_ms / 1000.0
        expected = model.predict(sent_behind)
        # Slower replies than expected are taken four times faster than quicker ones: a slowdown costs every request.
        tau = self._tau / 4 if sample > expected else self._tau
        keep = min(math.exp(-max(0.0, now - model.updated_at) / tau), 0.95) if model.samples else 0.0
        model.add(sent_behind, sample, keep)
        model.updated_at = now

    def _model(self, backend: str, now: float) -> _Model:
        model = self._models[backend] = _Model(updated_at=now)
        if len(self._models) > 100_000:  # backends come and go: forget the oldest
            del self._models[next(iter(self._models))]
        return model

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
        ready = [m for m in models if m is not None and m.samples >= self._min_samples]
        backlog = [self._backlog(view) for view in views]
        if ready:
            intercept = statistics.median(m.intercept_s for m in ready)  # a little-known backend: typical
            slope = statistics.median(m.slope_s for m in ready)
            cost = [
                m.predict(b) if m is not None and m.samples >= self._min_samples else intercept + slope * b
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
        first = order[0]
        chosen = self._models.get(views[first].id) or self._model(views[first].id, snapshot.now)
        chosen.sent.append(backlog[first])  # the backlog it is sent behind, for the reply's sample
        ids = [views[j].id for j in order[:wanted]]
        return with_drained(ids, table, limit) if table.drained else tuple(ids)


def _samples(model: _Model | None) -> int:
    """Replies a backend's model learned from (-1: never seen)."""
    return -1 if model is None else model.samples
