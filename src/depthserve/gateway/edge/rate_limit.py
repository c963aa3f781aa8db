"""Token-bucket rate limits per API key (or per client address without one), so a client over its share gets 429.

429 means "you, slow down"; it stays distinct from 503, which means "the service is overloaded".
"""

from __future__ import annotations

import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from depthserve.gateway.errors import GatewayError

_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0}
_SYNTAX = re.compile(r"(?P<count>\d+(?:\.\d+)?)\s*/\s*(?P<unit>[a-z]+)(?:\s+burst\s+(?P<burst>\d+))?", re.IGNORECASE)


@dataclass(frozen=True)
class Limit:
    """A sustained rate and the burst a full bucket allows."""

    rate_per_s: float
    burst: int

    def __post_init__(self) -> None:
        if not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)) or self.burst < 1:
            raise ValueError(f"a rate limit needs rate_per_s > 0 and burst >= 1, got {self}")

    @classmethod
    def parse(cls, text: str) -> Limit:
        """Read `COUNT/UNIT [burst N]`, e.g. "10/s", "600/min", "10/s burst 20" (units s, min, h).

        Without `burst` the bucket holds one second's worth (at least 1), so "600/min" is 10/s with burst 10
        rather than 600 requests at once.
        """
        match = _SYNTAX.fullmatch(text.strip())
        unit = _UNITS.get(match["unit"].lower()) if match else None
        if match is None or unit is None:
            raise ValueError(f"bad rate limit {text!r}; expected COUNT/UNIT [burst N] with UNIT s, min or h")
        rate = float(match["count"]) / unit
        burst = int(match["burst"]) if match["burst"] else max(1, math.ceil(rate))
        return cls(rate, burst)


class _Bucket:
    """Tokens left and when they were last topped up."""

    __slots__ = ("tokens", "updated")

    def __init__(self, tokens: float, updated: float) -> None:
        self.tokens = tokens
        self.updated = updated


class RateLimiter:
    """Checks one request per call against the caller's bucket; raises 429 with Retry-After when it is empty.

    Buckets are kept in least-recently-used order and the oldest is dropped beyond `max_buckets`, so a client
    inventing identities cannot grow memory. Dropping a bucket only forgets its debt: that identity starts
    again with a full burst, which is the same treatment a brand-new identity gets.
    """

    def __init__(
        self,
        default: Limit | None,
        per_key: Mapping[str, Limit] | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_buckets: int = 100_000,
    ) -> None:
        if max_buckets < 1:
            raise ValueError("max_buckets must be >= 1")
        self.default = default
        self.per_key = dict(per_key or {})
        self.max_buckets = max_buckets
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self.limited = 0  # requests refused, for metrics

    def limit_for(self, identity: str) -> Limit | None:
        """The limit that applies to an identity; None means unlimited."""
        return self.per_key.get(identity, self.default)

    def check(self, identity: str) -> None:
        """Spend one token for `identity`, or raise GatewayError 429 "rate_limited" if none is left."""
        limit = self.limit_for(identity)
        if limit is None:
            return
        now = self._clock()
        bucket = self._buckets.get(identity)
        if bucket is None:
            bucket = self._buckets[identity] = _Bucket(float(limit.burst), now)
            if len(self._buckets) > self.max_buckets:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(identity)
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(limit.burst), bucket.tokens + elapsed * limit.rate_per_s)
            bucket.updated = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return
        self.limited += 1
        wait = (1.0 - bucket.tokens) / limit.rate_per_s
        raise GatewayError(429, "rate_limited", f"rate limit exceeded; retry in {wait:.1f}s", retry_after=wait)

    def __len__(self) -> int:
        """Buckets held now."""
        return len(self._buckets)


def identity(key_name: str | None, client_host: str | None) -> str:
    """Name the rate-limit identity: the API key's name, else the client address (prefixed so they never clash)."""
    if key_name is not None:
        return key_name
    return f"addr:{client_host or 'unknown'}"
