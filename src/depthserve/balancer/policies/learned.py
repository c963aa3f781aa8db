"""A balancer that learns each backend's speed online from the completions it sees (issue 17).

For every backend it fits, by time-decayed least squares, latency = a + s x b, b being the backlog of
requests ahead when the request was sent (recorded at the pick) counted in batches of the slots the
worker reports (max_batch): `a` is what a request costs there on its own, `s` what each batch queued ahead
adds (about `a`; more where service times are heavy-tailed). Counted per request, a batching worker's
slope was not identified by the little spread of backlogs seen and the ridge pulled it up to `a`, so a
batch of four queued was costed four batches (failures scenario: p99 1.32x least_latency's).
The decay (`half_life_s`) lets a backend that slows down (thermal throttling, a noisy neighbour) be
noticed within a few replies; replies slower than expected count four times faster than quicker ones.
A pick samples `choice_count` backends (O(k) whatever the pool's size)
and sends to the cheapest, costed (a + s x b) x (b + 1) ^ bias with b the batches queued ahead: the
latency the model predicts there, times the batches there counting its own raised to a bias, as Envoy's
least-request balancer raises active requests + 1 (bias 1 is Finagle's latency x (in flight + 1) with the
learned latency, counted in batches; 0 is shortest expected delay). An idle pool goes to the fastest, and
the more a queue is penalised the sooner a slow backend takes work before the fast ones build a tail;
ties go to the faster. On a one-slot worker each request ahead is a whole heavy-tailed service to wait
for (`queue_bias`, 1); on a batching worker those queued share the next batch, so its queue weighs less
(`batch_queue_bias`, 0.5). Shortest expected delay kept slow backends idle near saturation (seed2_1000 at
95%: p99 1.37x least latency's); bias 1 on batching workers spread too early on a fleet with room
(mixed_fleet_1000: 1.12x), 0.5 on one-slot ones let heavy-tailed queues grow (four_workers at 80%: 2x);
BENCHMARKS.md has the sweep behind the defaults.
A backend's prediction ignores how long the call it is running has run, so while one heavy-tailed call
there takes ten times its mean it still reads as a short wait and requests queue behind it: `overdue`
(0.5) x how far the oldest call still out is past its predicted reply is added to the latency predicted
there (the mean time left of a lognormal sigma-1 service grows by ~0.4 x what it has run past its mean;
0 for a steady one), and a hung backend stops taking work before a timeout says so.
No offline data: a backend known too little is costed at the median
of the known ones, and before any is known it ranks as p2c does. A bounded share of picks (`explore`,
default 0.5%: under the 1% a p99 is made of) goes to the backend of the sample heard from longest ago among
those with nothing queued, so a backend that sped up again, or that one slow reply made look slow (it is
idle: nothing is sent there), is noticed, and no request is explored behind a queue, where near saturation
it waits out every heavy-tailed service ahead and starts a backlog that lasts. Feedback arrives through
`observe`, on the outcome path of every call.
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
MAX_KEEP = 0.95  # a sample weighs at least 5% however fast replies come: a slowdown shows within ~20 replies


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
    slots: float = 1.0  # requests it runs at once, as last reported: the backlog is counted in batches of these
    sent: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=4096))  # (at, backlog), oldest first

    def sent_behind(self, sent_at: float, outstanding: int) -> float | None:
        """Take the backlog recorded at the send nearest `sent_at`; forget the oldest beyond `outstanding` calls.

        Replies come back out of order (batches form by token grid, heavy tails) and some calls end unseen
        (abandoned, or sent elsewhere than picked): matching a reply to the oldest send would pair it with
        another request's backlog, so it is matched by when it was sent.
        """
        sent = self.sent
        if not sent:
            return None
        nearest = min(range(len(sent)), key=lambda i: abs(sent[i][0] - sent_at))
        backlog = sent[nearest][1]
        del sent[nearest]
        while len(sent) > max(outstanding, 0):  # calls that ended unseen: the oldest, as timeouts are
            sent.popleft()
        return backlog

    def overdue_s(self, fit: tuple[float, float], now: float) -> float:
        """How far past its expected reply (by `fit`, intercept and slope) the oldest call still out is, 0 if none."""
        if not self.sent:
            return 0.0
        sent_at, behind = self.sent[0]
        intercept_s, slope_s = fit
        return max(0.0, now - sent_at - (intercept_s + slope_s * behind))

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


class Learned:
    """Predicted latency x (batches ahead + 1) ^ bias, from online per-backend models; p2c while cold."""

    name: ClassVar[str] = "learned"

    def __init__(
        self,
        choice_count: int = 8,
        half_life_s: float = 2.0,
        explore: float = 0.005,
        min_samples: int = 3,
        queue_bias: float = 1.0,
        batch_queue_bias: float = 0.5,
        overdue: float = 0.5,
        seed: int | None = None,
    ) -> None:
        self._overdue = overdue
        self._choice_count = choice_count
        self._tau = half_life_s / math.log(2)
        self._explore = explore
        self._min_samples = min_samples
        self._queue_bias = queue_bias
        self._batch_queue_bias = batch_queue_bias
        self._rng = random.Random(seed)
        self._models: dict[str, _Model] = {}

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> Learned:
        """Read `choice_count` (2..64, default 8), `half_life_s` (0.1..600, default 2), `explore` (0..0.1,
        default 0.005: the share of picks spent learning), `min_samples` (1..100, default 3), `queue_bias` and
        `batch_queue_bias` (0..4, defaults 1 and 0.5: how steeply what is queued at a one-slot or a batching
        backend raises its cost), `overdue` (0..4, default 0.5: the share of its oldest call's lateness a
        backend's predicted latency takes)."""
        parse = Options(cls.name, options)
        learned = cls(
            parse.integer("choice_count", 8, 2, 64),
            parse.number("half_life_s", 2.0, 0.1, 600.0),
            parse.number("explore", 0.005, 0.0, 0.1),
            parse.integer("min_samples", 3, 1, 100),
            parse.number("queue_bias", 1.0, 0.0, 4.0),
            parse.number("batch_queue_bias", 0.5, 0.0, 4.0),
            parse.number("overdue", 0.5, 0.0, 4.0),
            seed,
        )
        parse.done()
        return learned

    def observe(self, backend: str, ok: bool, latency_ms: float, backlog: int, now: float) -> None:
        """Learn from one finished call: its latency and the backlog it was sent behind (from the pick)."""
        model = self._models.get(backend)
        if model is None:
            model = self._model(backend, now)
        recorded = model.sent_behind(now - latency_ms / 1000.0 if ok else -math.inf, backlog)
        sent_behind = max(backlog, 0) / model.slots if recorded is None else recorded
        if not ok:  # a failure makes it look slow at once
            model.intercept_s = max(model.intercept_s * 2.0, 1e-3)
            model.updated_at = now
            return
        sample = latency_ms / 1000.0
        expected = model.intercept_s + model.slope_s * sent_behind
        # Slower replies than expected are taken four times faster than quicker ones: a slowdown costs every request.
        tau = self._tau / 4 if sample > expected else self._tau
        keep = min(math.exp(-max(0.0, now - model.updated_at) / tau), MAX_KEEP) if model.samples else 0.0
        model.add(sent_behind, sample, keep)
        model.updated_at = now

    def _model(self, backend: str, now: float) -> _Model:
        model = self._models[backend] = _Model(updated_at=now)
        if len(self._models) > 100_000:  # backends come and go: forget the oldest
            del self._models[next(iter(self._models))]
        return model

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Sample, cost each by its predicted latency times (batches there + 1) ^ bias, cheapest first."""
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
        backlog = [_backlog(view) for view in views]
        slots = [_slots(view) for view in views]
        ahead = [b / n for b, n in zip(backlog, slots, strict=True)]  # batches queued ahead
        if ready:
            own = statistics.median(m.intercept_s for m in ready)  # a little-known backend: typical
            per_queued = statistics.median(m.slope_s for m in ready)
            fits = [
                (m.intercept_s, m.slope_s) if m is not None and m.samples >= self._min_samples else (own, per_queued)
                for m in models
            ]
            one, batch = self._queue_bias, self._batch_queue_bias
            late = [
                self._overdue * m.overdue_s(fit, snapshot.now) if m is not None and b > 0 else 0.0
                for m, fit, b in zip(models, fits, backlog, strict=True)
            ]
            cost = [
                ((a + s * b + d) * (b + 1.0) ** (one if n <= 1.0 else batch), a)
                for (a, s), b, n, d in zip(fits, ahead, slots, late, strict=True)
            ]
        else:  # nothing learned yet: p2c's rank, load per unit of weight
            weights = table.weights
            cost = [((b + 1.0) / weights[i], 0.0) for b, i in zip(backlog, sample, strict=True)]
        order = sorted(range(len(sample)), key=lambda j: (cost[j], j))
        if self._explore and len(order) > 1 and self._rng.random() < self._explore:
            idle = [j for j in order if backlog[j] <= 0]  # a request explored behind a queue is a tail to learn
            if idle:
                stalest = min(idle, key=lambda j: _heard_at(models[j]))
                order.remove(stalest)
                order.insert(0, stalest)  # learning: the idle backend of the sample heard from longest ago goes first
        first = order[0]
        chosen = self._models.get(views[first].id) or self._model(views[first].id, snapshot.now)
        chosen.slots = slots[first]
        chosen.sent.append((snapshot.now, ahead[first]))  # when, and behind how many batches, for the reply's sample
        ids = [views[j].id for j in order[:wanted]]
        return with_drained(ids, table, limit) if table.drained else tuple(ids)


def _backlog(view: View) -> float:
    """Requests ahead of a new one there: ours in flight, or what the backend reports, whichever is more."""
    reported = outstanding(view.load)
    in_flight = max(view.in_flight, 0)
    return float(in_flight if reported is None else max(in_flight, reported))


def _slots(view: View) -> float:
    """Requests the backend runs at once, as it reports (1 when unknown)."""
    load = view.load
    if load is None:
        return 1.0
    return float(max(load.slots, load.max_batch, 1))


def _heard_at(model: _Model | None) -> float:
    """When a backend's model last learned from a reply (-inf: never): a model that one heavy-tailed reply made
    look slow gets no traffic, so it is corrected only if exploration goes to the stalest, not the least seen."""
    return -math.inf if model is None or not model.samples else model.updated_at
