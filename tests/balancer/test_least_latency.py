"""Least latency: expected latency x load, peak-EWMA by default; a slowed backend loses its share."""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import replace

import pytest

from depthserve.balancer import BackendView, Policy, RequestInfo, Snapshot, make_policy
from depthserve.testing.snapshots import snapshot

ALPHA = 0.3


def simulate(policy: Policy, service_ms: list[float], slow: float, requests: int, gap_ms: float) -> list[str]:
    """Send a request every `gap_ms` to single-server FIFO backends; backend 0 slows by `slow` halfway."""
    views = {f"w{i}": BackendView(f"w{i}") for i in range(len(service_ms))}
    service = dict(zip(views, service_ms, strict=True))
    free_at = dict.fromkeys(views, 0.0)
    done: list[tuple[float, str, float]] = []  # (finish time, backend, latency)
    chosen = []
    for n in range(requests):
        now = n * gap_ms
        if n == requests // 2:
            service["w0"] *= slow
        while done and done[0][0] <= now:
            _, backend, latency = heapq.heappop(done)
            view = views[backend]
            ewma = latency if view.ewma_ms == 0 else view.ewma_ms + ALPHA * (latency - view.ewma_ms)
            peak = max(latency, view.peak_ewma_ms + ALPHA * (latency - view.peak_ewma_ms))
            views[backend] = replace(view, in_flight=view.in_flight - 1, ewma_ms=ewma, peak_ewma_ms=peak)
        backend = policy.pick(Snapshot(tuple(views.values()), now), RequestInfo())[0]
        free_at[backend] = max(now, free_at[backend]) + service[backend]
        heapq.heappush(done, (free_at[backend], backend, free_at[backend] - now))
        views[backend] = replace(views[backend], in_flight=views[backend].in_flight + 1)
        chosen.append(backend)
    return chosen


@pytest.mark.parametrize("metric", ["peak_ewma", "ewma"])
def test_slowed_backend_share_falls_well_below_one_in_n(metric: str) -> None:
    chosen = simulate(make_policy("least_latency", {"metric": metric}), [10.0] * 4, 5.0, 4000, 4.0)
    before, after = Counter(chosen[1000:2000]), Counter(chosen[3000:])
    assert before["w0"] / 1000 > 0.15  # a fair share while all are equal
    assert after["w0"] / 1000 < 0.25 / 3  # then well below 1/N
    round_robin = simulate(make_policy("round_robin"), [10.0] * 4, 5.0, 4000, 4.0)
    assert Counter(round_robin[3000:])["w0"] == 250  # blind to latency, for contrast


def test_cost_is_latency_times_load() -> None:
    policy = make_policy("least_latency")
    snap = snapshot(
        BackendView("fast_busy", ewma_ms=10, peak_ewma_ms=10, in_flight=5),  # 60
        BackendView("slow_idle", ewma_ms=50, peak_ewma_ms=50),  # 50
        BackendView("mid", ewma_ms=20, peak_ewma_ms=20, in_flight=1),  # 40
    )
    assert policy.pick(snap, RequestInfo()) == ("mid", "slow_idle", "fast_busy")


def test_peak_is_the_default_metric_and_ewma_is_the_fallback() -> None:
    snap = snapshot(BackendView("a", ewma_ms=10, peak_ewma_ms=40), BackendView("b", ewma_ms=20))
    assert make_policy("least_latency").pick(snap, RequestInfo())[0] == "b"  # a 40 (peak) vs b 20 (no peak)
    assert make_policy("least_latency", {"metric": "ewma"}).pick(snap, RequestInfo())[0] == "a"


def test_new_backend_is_tried_but_not_flooded() -> None:
    policy = make_policy("least_latency")
    known = [BackendView(f"k{i}", ewma_ms=ms, peak_ewma_ms=ms) for i, ms in enumerate((10, 20, 30))]
    # The newcomer is costed at the median (20): it beats a known backend that is busier...
    assert policy.pick(snapshot(*known, BackendView("new", in_flight=0)), RequestInfo())[0] == "k0"
    busy = [replace(k, in_flight=3) for k in known]
    assert policy.pick(snapshot(*busy, BackendView("new")), RequestInfo())[0] == "new"
    # ...but once it carries load it is no longer free.
    assert policy.pick(snapshot(*busy, BackendView("new", in_flight=4)), RequestInfo())[0] == "k0"


def test_errors_inflate_the_cost() -> None:
    snap = snapshot(BackendView("flaky", ewma_ms=10, error_rate=0.5), BackendView("steady", ewma_ms=15))
    assert make_policy("least_latency").pick(snap, RequestInfo())[0] == "steady"  # 10 / (1 - 0.5) = 20
    assert make_policy("least_latency", {"error_penalty": 0}).pick(snap, RequestInfo())[0] == "flaky"


def test_weights_drain_and_options() -> None:
    policy = make_policy("least_latency")
    snap = snapshot(BackendView("z", weight=0, ewma_ms=1), BackendView("a", ewma_ms=10), BackendView("b", weight=2))
    assert policy.pick(snap, RequestInfo()) == ("b", "a", "z")  # b: median 10 / 2 = 5
    assert policy.pick(snapshot(), RequestInfo()) == ()
    with pytest.raises(ValueError, match="metric"):
        make_policy("least_latency", {"metric": "p99"})
