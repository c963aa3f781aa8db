"""One backend's health flags: what active checks, passive ejection and operators say about it.

Health checking and outlier detection only flip these flags; the pool derives the eligible set
from them (Envoy's reloadHealthyHosts), and policies never see ejection at all. Every flip that can
change that set calls `on_change`, so the pool rebuilds its tables then and only then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

WARMING, READY, UNHEALTHY, EJECTED, DRAINING, LEAVING = (
    "warming",
    "ready",
    "unhealthy",
    "ejected",
    "draining",
    "leaving",
)


@dataclass
class BackendHealth:
    """Flags for one backend; times are the gateway's monotonic clock."""

    healthy: bool = False  # verdict of the active checks (thresholds applied)
    serving: bool | None = None  # the backend's own gRPC health answer; None = no answer
    ever_ready: bool = False
    check_failures: int = 0  # consecutive failed active checks
    check_successes: int = 0  # consecutive passed active checks
    ejected_until: float = float("-inf")  # passive ejection (outlier detection)
    times_ejected: int = 0
    ready_since: float = float("-inf")  # when it last became eligible, for slow start
    not_serving_phase: str = WARMING  # what a NOT_SERVING answer means: warming (was out) or draining (was in)
    doubted_at: float = float("-inf")  # when an active check last failed or timed out (a request there may be stuck)
    on_change: Callable[[], None] = field(default=lambda: None, repr=False, compare=False)

    def check_passed(self, now: float, healthy_threshold: int, proven: bool = True) -> bool:
        """Record a passed active check; True when this makes the backend healthy again.

        Only a `proven` pass (a real inference answered, not just gRPC health) clears failures in doubt
        and ends a passive ejection, as Envoy's successful active check does.
        """
        self.serving = True
        if not proven and (self.check_failures or not self.healthy):
            return False  # a health answer alone cannot outvote a failed inference
        self.check_failures = 0
        self.check_successes += 1
        if proven and self.ejected_until != float("-inf"):
            self.ejected_until = float("-inf")
            self.on_change()
        if self.healthy or (self.ever_ready and self.check_successes < healthy_threshold):
            return False
        self.healthy = self.ever_ready = True
        self.ready_since = now
        self.on_change()
        return True

    def check_failed(self, unhealthy_threshold: int) -> bool:
        """Record a failed active check (no answer, timeout, failed probe); True when this makes it unhealthy."""
        self.check_successes = 0
        self.check_failures += 1
        if self.healthy and self.check_failures >= unhealthy_threshold:
            self.healthy = False
            self.on_change()
            return True
        return False

    def not_serving(self) -> bool:
        """Record the backend saying NOT_SERVING (warming up or draining): out at once; True if it was in."""
        if self.serving is not False:
            self.not_serving_phase = DRAINING if self.healthy else WARMING
        self.serving = False
        self.check_successes = 0
        was = self.healthy
        self.healthy = False
        if was:
            self.on_change()
        return was

    def eject(self, now: float, base_s: float, max_s: float) -> float:
        """Eject for base x times ejected (capped); return the ejection's length."""
        self.times_ejected += 1
        length = min(base_s * self.times_ejected, max_s)
        self.ejected_until = now + length
        self.on_change()
        return length

    def ejected(self, now: float) -> bool:
        """Whether a passive ejection is in force."""
        return now < self.ejected_until

    def state(self, now: float) -> str:
        """Name the state shown to operators."""
        if self.serving is False:
            return self.not_serving_phase
        if not self.healthy:
            return UNHEALTHY if self.ever_ready or self.check_failures else WARMING
        return EJECTED if self.ejected(now) else READY
