"""Passive outlier detection: consecutive failures on real traffic eject a backend for a while.

Envoy's rules: ejection lasts base_ejection_time x times ejected (capped at max_ejection_time); no
more than max_ejection_percent of backends are out at once, but at least one may always be.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from depthserve.gateway.upstream.backend_health import BackendHealth

log = logging.getLogger("depthserve.gateway")


class OutlierDetector:
    """Decides ejections from per-backend failure streaks; it only flips BackendHealth flags."""

    def __init__(
        self,
        consecutive_errors: int = 5,
        base_ejection_s: float = 30.0,
        max_ejection_s: float = 300.0,
        max_ejection_percent: float = 50.0,
    ) -> None:
        self.consecutive_errors = consecutive_errors
        self.base_ejection_s = base_ejection_s
        self.max_ejection_s = max_ejection_s
        self.max_ejection_percent = max_ejection_percent

    def allowed(self, total: int) -> int:
        """How many backends may be ejected at once out of `total` (at least one)."""
        return max(1, math.floor(total * self.max_ejection_percent / 100.0))

    def consider(
        self, name: str, health: BackendHealth, streak: int, everyone: Iterable[BackendHealth], now: float
    ) -> bool:
        """Eject `health` if its failure streak reached the threshold and the cap allows; True if ejected."""
        if streak < self.consecutive_errors or health.ejected(now):
            return False
        population = list(everyone)
        if sum(1 for h in population if h.ejected(now)) >= self.allowed(len(population)):
            return False
        length = health.eject(now, self.base_ejection_s, self.max_ejection_s)
        log.warning("ejecting backend %s for %.0fs after %d consecutive failures", name, length, streak)
        return True
