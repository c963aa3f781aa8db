"""The gateway's own measurements of one backend: in-flight, latency EWMA and peak-EWMA, error rate."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from depthserve.telemetry.buckets import BucketCounts


@dataclass
class BackendStats:
    """Updated by the dispatcher after every call (one owner: the gateway's event loop).

    Peak-EWMA follows Finagle: a slower sample is taken at once, faster ones pull it down with a
    time constant, so one slow backend is avoided immediately and re-tried gradually.
    """

    alpha: float = 0.3  # weight of the newest sample in the plain EWMAs
    peak_decay_s: float = 10.0  # time constant of peak-EWMA's decay towards faster samples
    in_flight: int = 0
    sent_since_report: int = 0  # calls started since the backend's last load report, not yet in its queue count
    served: int = 0
    errors: int = 0
    consecutive_errors: int = 0
    ewma_ms: float = 0.0
    peak_ewma_ms: float = 0.0
    error_rate: float = 0.0
    _last_sample_at: float | None = None
    latency: BucketCounts = field(default_factory=BucketCounts)  # successful call times, seconds, for metrics

    def started(self) -> None:
        """Count a call about to be sent."""
        self.in_flight += 1
        self.sent_since_report += 1

    def reported(self) -> None:
        """A fresh load report arrived: it counts every call sent before it in the backend's own queue."""
        self.sent_since_report = 0

    def abandoned(self) -> None:
        """Count a call that ended without a result that is not the backend's fault (a cancelled hedge, a 4xx)."""
        self.in_flight -= 1

    def recovered(self) -> None:
        """Forget the failures of an outage the backend came back from, or policies would keep shunning it.

        The error-rate EWMA moves only with samples, and a backend costed high for its old errors gets
        no samples: after a restart it sat nearly unused though its health checks passed.
        """
        self.error_rate = 0.0
        self.consecutive_errors = 0

    def finished(self, ok: bool, latency_ms: float, now: float) -> None:
        """Count a finished call; successful ones feed the latency averages, failed ones the error rate."""
        self.in_flight -= 1
        self.error_rate += self.alpha * ((0.0 if ok else 1.0) - self.error_rate)
        if not ok:
            self.errors += 1
            self.consecutive_errors += 1
            return
        self.served += 1
        self.consecutive_errors = 0
        self.latency.observe(latency_ms / 1000.0)
        if self._last_sample_at is None:
            self.ewma_ms = self.peak_ewma_ms = latency_ms
        else:
            self.ewma_ms += self.alpha * (latency_ms - self.ewma_ms)
            if latency_ms > self.peak_ewma_ms:
                self.peak_ewma_ms = latency_ms
            else:
                keep = math.exp(-max(0.0, now - self._last_sample_at) / self.peak_decay_s)
                self.peak_ewma_ms = self.peak_ewma_ms * keep + latency_ms * (1.0 - keep)
        self._last_sample_at = now

    def peak_at(self, now: float) -> float:
        """Peak-EWMA decayed towards the EWMA for the time since the last sample, so an avoided backend is re-tried."""
        if self._last_sample_at is None:
            return self.peak_ewma_ms
        keep = math.exp(-max(0.0, now - self._last_sample_at) / self.peak_decay_s)
        return self.ewma_ms + (self.peak_ewma_ms - self.ewma_ms) * keep

    def describe(self) -> dict[str, float | int]:
        """Summarise for /v1/cluster."""
        return {
            "in_flight": self.in_flight,
            "served": self.served,
            "errors": self.errors,
            "consecutive_errors": self.consecutive_errors,
            "ewma_ms": round(self.ewma_ms, 3),
            "peak_ewma_ms": round(self.peak_ewma_ms, 3),
            "error_rate": round(self.error_rate, 4),
        }
