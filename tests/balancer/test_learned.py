"""The learning policy: cold it ranks like p2c, it learns which backend is faster, it notices a slowdown."""

from __future__ import annotations

from collections import Counter

import pytest

from depthserve.balancer import BackendView, RequestInfo, make_policy
from depthserve.balancer.policies.learned import Learned, _Model
from depthserve.balancer.types import Snapshot, Table
from depthserve.protocol.load_report import LoadReport
from depthserve.testing.snapshots import report, snapshot

REQUEST = RequestInfo()


def test_cold_it_ranks_by_load_like_p2c() -> None:
    policy = make_policy("learned", {"explore": 0.0}, seed=1)
    snap = snapshot(BackendView("busy", in_flight=5), BackendView("idle", in_flight=0))
    assert policy.pick(snap, REQUEST, 2) == ("idle", "busy")


def test_it_learns_the_faster_backend_from_replies_and_weighs_it_against_backlog() -> None:
    policy = Learned(choice_count=2, explore=0.0, min_samples=3, seed=1)
    for t in range(10):  # replies at an empty backlog: fast answers in 20 ms, slow in 80 ms
        policy.observe("fast", True, 20.0, 0, float(t))
        policy.observe("slow", True, 80.0, 0, float(t))
    idle = snapshot(BackendView("fast"), BackendView("slow"))
    assert policy.pick(idle, REQUEST, 1) == ("fast",)
    queued = snapshot(BackendView("fast", in_flight=4), BackendView("slow"))  # (20 + 4 x 20) x 5 ms > 80 ms
    assert policy.pick(queued, REQUEST, 1) == ("slow",)


def test_a_slowdown_is_noticed_within_a_few_replies_and_a_failure_at_once() -> None:
    policy = Learned(choice_count=2, explore=0.0, min_samples=3, seed=1, half_life_s=2.0)
    for t in range(10):
        policy.observe("a", True, 20.0, 0, t * 0.1)
        policy.observe("b", True, 30.0, 0, t * 0.1)
    pair = snapshot("a", "b")
    assert policy.pick(pair, REQUEST, 1) == ("a",)
    for step in range(3):  # a slows down 4x (throttled): three replies later it is avoided
        policy.observe("a", True, 80.0, 0, 1.0 + step * 0.1)
    assert policy.pick(pair, REQUEST, 1) == ("b",)
    policy.observe("b", False, 0.0, 0, 2.0)  # b fails
    assert policy.pick(pair, REQUEST, 1) == ("a",)


def test_exploration_stays_within_its_share() -> None:
    policy = Learned(choice_count=2, explore=0.05, min_samples=1, seed=7)
    for t in range(5):
        policy.observe("fast", True, 10.0, 0, float(t))
    policy.observe("slow", True, 100.0, 0, 0.0)
    pair = snapshot("fast", "slow")
    firsts = Counter(policy.pick(pair, REQUEST, 1)[0] for _ in range(20_000))
    assert 0.03 < firsts["slow"] / 20_000 < 0.07  # the least observed goes first on 5% of picks


def test_a_backend_one_slow_reply_made_look_slow_is_explored_and_taken_back() -> None:
    # four_workers seed 1 at a true 95%: one fast worker's model read 773 ms after a heavy-tailed reply behind
    # a queue, got no traffic for 15 s and so no reply to correct it (p99 3.8x least connections').
    policy = Learned(choice_count=2, explore=0.05, min_samples=1, seed=7)
    for step in range(200):
        policy.observe("a", True, 20.0, 0, step * 0.01)  # a: the better known, 200 replies to b's 110
    for step in range(10):
        policy.observe("b", True, 20.0, 0, step * 0.05)
    policy.observe("a", True, 3000.0, 0, 2.0)  # a 3 s tail of the service time: a now looks slow
    for step in range(100):
        policy.observe("b", True, 20.0, 0, 2.0 + step * 0.1)  # b stays fresh
    pair = snapshot(BackendView("a"), BackendView("b", in_flight=1), now=12.0)  # a idle, b busy: a still costs more
    firsts = Counter(policy.pick(pair, REQUEST, 1)[0] for _ in range(4_000))
    assert 0.03 < firsts["a"] / 4_000 < 0.07, "a, heard from longest ago, is explored (not b, the less seen)"
    for step in range(3):  # the explored requests' replies: fast again
        policy.observe("a", True, 20.0, 0, 12.0 + step * 0.05)
    firsts = Counter(policy.pick(pair, REQUEST, 1)[0] for _ in range(4_000))
    assert firsts["a"] / 4_000 > 0.9, "three fresh replies outweigh the stale tail: the idle a is taken back"


def test_exploration_goes_only_to_a_backend_with_nothing_queued() -> None:
    # four_workers seed 1 at 99% of capacity: a request explored onto a slow worker's queue waited behind every
    # heavy-tailed service there, and a backlog that starts near saturation lasts to the run's end (p99 1.6x).
    policy = Learned(choice_count=2, explore=0.05, min_samples=1, seed=7)
    policy.observe("stale", True, 80.0, 0, 0.0)
    for step in range(50):
        policy.observe("fresh", True, 20.0, 0, step * 0.1)
    queued = snapshot(BackendView("stale", in_flight=2), BackendView("fresh", in_flight=1), now=5.0)
    firsts = Counter(policy.pick(queued, REQUEST, 1)[0] for _ in range(4_000))
    assert firsts["stale"] == 0, "no request is explored behind a queue"
    idle = snapshot(BackendView("stale"), BackendView("fresh", in_flight=1), now=5.0)
    firsts = Counter(policy.pick(idle, REQUEST, 1)[0] for _ in range(4_000))
    assert 0.03 < firsts["stale"] / 4_000 < 0.07, "idle, the stale backend is explored at the set share"


def test_options_are_read_and_bounded() -> None:
    with pytest.raises(ValueError, match="explore"):
        make_policy("learned", {"explore": 0.5})
    with pytest.raises(ValueError, match="queue_bias"):
        make_policy("learned", {"queue_bias": 5})
    with pytest.raises(ValueError, match="batch_queue_bias"):
        make_policy("learned", {"batch_queue_bias": -1})
    with pytest.raises(ValueError, match="unknown option"):
        make_policy("learned", {"epsilon": 0.1})


def test_traffic_moves_away_from_a_backend_whose_replies_got_four_times_slower() -> None:
    policy = Learned(choice_count=2, explore=0.0, seed=3)
    pair = snapshot("a", "b")
    for step in range(40):  # equal speeds: 20 ms each
        policy.observe("a", True, 20.0, 0, step * 0.05)
        policy.observe("b", True, 20.0, 0, step * 0.05)
    for step in range(10):  # a throttles: its replies now take 80 ms
        policy.observe("a", True, 80.0, 0, 2.0 + step * 0.05)
        policy.observe("b", True, 20.0, 0, 2.0 + step * 0.05)
    firsts = Counter(policy.pick(pair, REQUEST, 1)[0] for _ in range(1_000))
    assert firsts["b"] == 1_000


def _learned_speeds(policy: Learned, *fast: str) -> None:
    """Teach a policy fast backends (20 ms a request, 20 ms per request queued) and a 4x slower one."""
    for step in range(30):
        for backlog in (0, 1, 2):
            for name in fast:
                policy.observe(name, True, 20.0 * (backlog + 1), backlog, step * 0.01)
            policy.observe("slow", True, 80.0 * (backlog + 1), backlog, step * 0.01)


ONE_SLOT = report(max_batch=1)
FASTS = [f"fast{i}" for i in range(6)]


def test_an_idle_pool_sends_to_the_fastest() -> None:
    policy = Learned(choice_count=2, explore=0.0, seed=1)
    _learned_speeds(policy, *FASTS)
    pair = snapshot(BackendView("slow", load=ONE_SLOT), BackendView("fast0", load=ONE_SLOT), now=1.0)
    assert policy.pick(pair, REQUEST, 2) == ("fast0", "slow")


def test_two_queued_on_a_four_times_faster_backend_send_the_next_to_the_idle_slow_one() -> None:
    policy = Learned(choice_count=2, explore=0.0, seed=1)
    _learned_speeds(policy, *FASTS)
    one = snapshot(BackendView("fast0", in_flight=1, load=ONE_SLOT), BackendView("slow", in_flight=1, load=ONE_SLOT))
    assert policy.pick(one, REQUEST, 1) == ("fast0",)  # (20 + 20) x 2 = 80 ms against (80 + 80) x 2
    two = snapshot(BackendView("fast0", in_flight=2, load=ONE_SLOT), BackendView("slow", load=ONE_SLOT), now=1.0)
    # (20 + 2 x 20) x 3 = 180 against 80. Shortest expected delay (the old rule) took fast0, 60 ms against 80 ms,
    # and near saturation kept the slow backends idle while the fast ones' queues grew (seed2_1000 at 95%).
    assert policy.pick(two, REQUEST, 1) == ("slow",)


@pytest.mark.parametrize(("bias", "first"), [(0.0, "fast0"), (0.5, "fast0"), (2.0, "slow")])
def test_the_queue_bias_sets_how_soon_a_queue_sends_work_to_a_slower_backend(bias: float, first: str) -> None:
    policy = make_policy("learned", {"explore": 0.0, "choice_count": 2, "queue_bias": bias}, seed=1)
    assert isinstance(policy, Learned)
    _learned_speeds(policy, *FASTS)
    one = snapshot(BackendView("fast0", in_flight=1, load=ONE_SLOT), BackendView("slow", load=ONE_SLOT), now=1.0)
    # One queued on the 4x faster backend: 40 ms there, x 2 ^ bias (40, 57, 160 ms) against 80 ms on the idle slow one.
    expected = ("fast0", "slow") if first == "fast0" else ("slow", "fast0")
    assert policy.pick(one, REQUEST, 2) == expected


def test_exploration_by_default_stays_under_the_one_percent_a_p99_is_made_of() -> None:
    policy = make_policy("learned", {}, seed=5)
    assert isinstance(policy, Learned)
    for t in range(5):
        policy.observe("fast", True, 10.0, 0, float(t))
    policy.observe("slow", True, 100.0, 0, 0.0)
    pair = snapshot("fast", "slow")
    firsts = Counter(policy.pick(pair, REQUEST, 1)[0] for _ in range(40_000))
    assert 0.002 < firsts["slow"] / 40_000 < 0.01


class _Counted:
    """A backend view that counts how often a pick reads it."""

    reads = 0

    def __init__(self, name: str) -> None:
        self._id = name

    def _read(self) -> None:
        _Counted.reads += 1

    @property
    def id(self) -> str:
        self._read()
        return self._id

    @property
    def weight(self) -> float:
        return 1.0  # read once by the table, when the pool changes

    @property
    def in_flight(self) -> int:
        self._read()
        return 1

    @property
    def ewma_ms(self) -> float:
        self._read()
        return 20.0

    @property
    def peak_ewma_ms(self) -> float:
        self._read()
        return 20.0

    @property
    def error_rate(self) -> float:
        self._read()
        return 0.0

    @property
    def load(self) -> LoadReport | None:
        self._read()
        return report(queue=1, max_batch=4)


@pytest.mark.parametrize("size", [100, 10_000])
def test_a_pick_reads_a_few_backends_whatever_the_pool_size(size: int) -> None:
    policy = Learned(seed=2)
    table = Table([_Counted(f"w{i}") for i in range(size)])
    for i in range(size):  # warm: every backend known
        policy.observe(f"w{i}", True, 20.0, 1, 0.0)
        policy.observe(f"w{i}", True, 20.0, 1, 0.0)
        policy.observe(f"w{i}", True, 20.0, 1, 0.0)
    _Counted.reads = 0
    for _ in range(100):
        assert len(policy.pick(Snapshot(table=table, now=1.0), REQUEST, 3)) == 3
    assert _Counted.reads <= 100 * 8 * 6  # at most choice_count (8) views, each read a few times


def test_a_reply_is_paired_with_the_backlog_of_its_own_send_even_out_of_order() -> None:
    model = _Model()
    model.sent.extend([(0.0, 0.0), (1.0, 5.0), (2.0, 9.0)])
    assert model.sent_behind(1.0, 2) == 5.0  # the second send's reply came back first
    assert model.sent_behind(-float("inf"), 1) == 0.0  # a failure (no latency): the oldest send
    assert list(model.sent) == [(2.0, 9.0)]


def test_sends_that_ended_unseen_are_forgotten_oldest_first() -> None:
    model = _Model()
    model.sent.extend([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)])
    assert model.sent_behind(3.0, 1) == 4.0  # one call still out: two sends ended unseen (abandoned)
    assert list(model.sent) == [(2.0, 3.0)]


def test_on_a_batching_worker_the_backlog_counts_in_batches_of_its_slots() -> None:
    policy = Learned(choice_count=2, explore=0.0, seed=1)
    for step in range(10):  # replies at an empty backlog only: the data says nothing of the queue's cost
        policy.observe("batching", True, 20.0, 0, step * 0.01)
        policy.observe("single", True, 80.0, 0, step * 0.01)
    batching = BackendView("batching", in_flight=3, load=report(max_batch=4))
    single = BackendView("single", load=ONE_SLOT)
    # Three queued fit in one batch of four: 3/4 of a batch ahead, (20 + 0.75 x 20) x 1.75 ^ 0.5 = 46 ms (a batching
    # worker's queue weighs with batch_queue_bias, 0.5), beats 80 ms idle. Counted per request, (20 + 3 x 20) x
    # 4 ^ 0.5 = 160 ms, the idle, four times slower worker would take it.
    assert policy.pick(snapshot(batching, single, now=1.0), REQUEST, 1) == ("batching",)


def test_the_batch_queue_bias_weighs_only_batching_workers_queues() -> None:
    policy = make_policy("learned", {"explore": 0.0, "queue_bias": 0.0, "batch_queue_bias": 2.0}, seed=1)
    assert isinstance(policy, Learned)
    for step in range(10):
        policy.observe("batching", True, 20.0, 0, step * 0.01)
        policy.observe("single", True, 80.0, 0, step * 0.01)
    batching = BackendView("batching", in_flight=3, load=report(max_batch=4))
    single = BackendView("single", load=ONE_SLOT)
    # (20 + 0.75 x 20) x 1.75 ^ 2 = 107 ms against 80: a steeper batch bias sends it to the idle one-slot worker.
    assert policy.pick(snapshot(batching, single, now=1.0), REQUEST, 1) == ("single",)


def test_the_send_records_the_batches_queued_ahead_for_the_replys_sample() -> None:
    policy = Learned(choice_count=2, explore=0.0, seed=1)
    policy.pick(snapshot(BackendView("w", in_flight=8, load=report(max_batch=4)), now=1.0), REQUEST, 1)
    assert list(policy._models["w"].sent) == [(1.0, 2.0)]
    policy.observe("w", True, 60.0, 8, 1.06)
    model = policy._models["w"]
    assert model.backlog == pytest.approx(2.0)  # learned against two batches ahead, not eight requests


@pytest.mark.parametrize(("overdue", "first"), [(0.0, "fast0"), (0.5, "fast1")])
def test_a_call_running_far_past_its_predicted_reply_sends_the_next_one_elsewhere(overdue: float, first: str) -> None:
    policy = make_policy("learned", {"explore": 0.0, "choice_count": 2, "overdue": overdue}, seed=1)
    assert isinstance(policy, Learned)
    _learned_speeds(policy, *FASTS)
    sent = snapshot(BackendView("fast0", load=ONE_SLOT), BackendView("fast1", in_flight=1, load=ONE_SLOT), now=1.0)
    assert policy.pick(sent, REQUEST, 1) == ("fast0",)  # idle: taken at 1.0 s, predicted to reply in 20 ms
    # Half a second on, that call is still out (a heavy-tailed draw, or a hung worker): (20 + 20) x 2 = 80 ms
    # predicted behind it, against (20 + 2 x 20) x 3 = 180 on fast1, unless 0.5 x its 480 ms late is added.
    later = snapshot(
        BackendView("fast0", in_flight=1, load=ONE_SLOT), BackendView("fast1", in_flight=2, load=ONE_SLOT), now=1.5
    )
    assert policy.pick(later, REQUEST, 1) == (first,)


def test_lateness_is_read_from_the_oldest_call_still_out_and_only_past_its_prediction() -> None:
    model = _Model()
    assert model.overdue_s((0.02, 0.02), 5.0) == 0.0  # nothing out
    model.sent.extend([(1.0, 2.0), (1.4, 0.0)])
    assert model.overdue_s((0.02, 0.02), 1.05) == 0.0  # sent behind two batches: due at 1.06 s
    assert model.overdue_s((0.02, 0.02), 1.5) == pytest.approx(0.44)
