"""Token-bucket rate limits: burst then refill, Retry-After, per-key overrides, and bounded memory."""

from __future__ import annotations

import pytest

from depthserve.gateway.edge.rate_limit import Limit, RateLimiter, identity
from depthserve.gateway.errors import GatewayError
from depthserve.testing.fakes import FakeClock


def allowed(limiter: RateLimiter, key: str) -> bool:
    try:
        limiter.check(key)
    except GatewayError as err:
        assert (err.status, err.reason) == (429, "rate_limited")
        return False
    return True


def test_burst_then_refill() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Limit(rate_per_s=2.0, burst=3), clock=clock)
    assert [allowed(limiter, "k") for _ in range(4)] == [True, True, True, False]
    clock.advance(0.5)  # one token back at 2/s
    assert allowed(limiter, "k") and not allowed(limiter, "k")
    clock.advance(60)  # refill caps at the burst
    assert sum(allowed(limiter, "k") for _ in range(10)) == 3
    assert limiter.limited == 1 + 1 + 7


def test_retry_after_is_time_to_next_token() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Limit(rate_per_s=4.0, burst=1), clock=clock)
    limiter.check("k")
    clock.advance(0.1)  # 0.4 of a token refilled
    with pytest.raises(GatewayError) as info:
        limiter.check("k")
    assert info.value.retry_after == pytest.approx(0.15)
    assert info.value.response().headers["Retry-After"] == "1"  # the header never says 0


def test_per_key_override_and_unlimited() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Limit(1.0, 1), {"batch-job": Limit(100.0, 50)}, clock=clock)
    assert sum(allowed(limiter, "batch-job") for _ in range(60)) == 50
    assert sum(allowed(limiter, "other") for _ in range(5)) == 1
    open_limiter = RateLimiter(None, {"capped": Limit(1.0, 1)}, clock=clock)
    assert all(allowed(open_limiter, "anyone") for _ in range(1000))
    assert len(open_limiter) == 0  # unlimited identities hold no bucket
    assert [allowed(open_limiter, "capped") for _ in range(2)] == [True, False]


def test_bucket_count_is_bounded() -> None:
    clock = FakeClock()
    limiter = RateLimiter(Limit(1.0, 1), clock=clock, max_buckets=100)
    for n in range(10_000):
        limiter.check(f"random-{n}")
    assert len(limiter) == 100
    limiter.check("hot")
    for n in range(99):
        limiter.check(f"again-{n}")
        assert not allowed(limiter, "hot")  # recently used, so never the one evicted
    assert len(limiter) == 100


@pytest.mark.parametrize(
    ("text", "rate", "burst"),
    [
        ("10/s", 10.0, 10),
        ("600/min", 10.0, 10),
        ("10/s burst 20", 10.0, 20),
        (" 30 / MIN  burst 5 ", 0.5, 5),
        ("0.5/second", 0.5, 1),
        ("7200/h", 2.0, 2),
    ],
)
def test_parse(text: str, rate: float, burst: int) -> None:
    assert Limit.parse(text) == Limit(rate, burst)


@pytest.mark.parametrize("text", ["", "10", "10/fortnight", "ten/s", "10/s burst", "10/s burst 0", "0/s", "-1/s"])
def test_parse_rejects_junk(text: str) -> None:
    with pytest.raises(ValueError):
        Limit.parse(text)


def test_identity_prefers_key_name() -> None:
    assert identity("alice", "10.0.0.1") == "alice"
    assert identity(None, "10.0.0.1") == "addr:10.0.0.1"
    assert identity(None, None) == "addr:unknown"
