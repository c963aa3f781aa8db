"""The small frozen slices of the gateway's settings that each component takes, instead of all 70-odd fields.

Users still see one flat set of keys (flags, `DEPTHSERVE_GATEWAY_*`, YAML); a slice names only the
fields its component reads, copied by name from the settings, so no default is written twice and a
component's dependencies can be read off its constructor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from depthserve.settings import VersionRouteConfig

SliceT = TypeVar("SliceT", bound="SettingsSlice")


class SettingsSlice:
    """A dataclass whose fields are named as settings fields are; `of(settings)` copies them."""

    @classmethod
    def of(cls: type[SliceT], settings: BaseModel) -> SliceT:
        """The slice of `settings` this component reads."""
        values: dict[str, Any] = {f.name: getattr(settings, f.name) for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**values)


@dataclass(frozen=True)
class HealthCheckConfig(SettingsSlice):
    """How active health checks probe each backend."""

    model: str  # the model a probe asks for when a backend is untagged
    health_interval_s: float
    health_timeout_s: float
    unhealthy_threshold: int
    healthy_threshold: int
    probe_timeout_s: float
    probe_inference_every: int
    max_report_age_s: float


@dataclass(frozen=True)
class OutlierConfig(SettingsSlice):
    """When failures on real traffic eject a backend, and for how long."""

    consecutive_errors: int
    base_ejection_s: float
    max_ejection_s: float
    max_ejection_percent: float


@dataclass(frozen=True)
class UpstreamConfig(SettingsSlice):
    """How the gateway dials its workers: message limits and TLS."""

    max_message_mb: int
    backend_tls_ca: Path | None
    backend_tls_cert: Path | None
    backend_tls_key: Path | None


@dataclass(frozen=True)
class PoolConfig(SettingsSlice):
    """The backend table: its initial members, weights, slow start, panic, reports, version routes."""

    backends: list[str]
    auto_weights: bool
    max_report_age_s: float
    panic_threshold_percent: float
    slow_start_s: float
    ewma_alpha: float
    peak_decay_s: float
    max_request_timeout_s: float  # the longest a removed backend's last call may still run
    versions: Mapping[str, VersionRouteConfig]
    version_seed: int | None


@dataclass(frozen=True)
class DispatchConfig(SettingsSlice):
    """Attempts of one request: how many, how long each, the retry budget, hedging, the per-backend cap."""

    max_attempts: int
    per_try_timeout_s: float
    retry_budget_percent: float
    min_retry_concurrency: int
    max_outstanding_per_backend: int
    hedge: bool
    hedge_min_ms: float


@dataclass(frozen=True)
class EdgeConfig(SettingsSlice):
    """What every request passes at the door: keys, rate limits, admission, and the buffer budgets."""

    api_keys_file: Path | None
    rate_limit: str | None
    rate_limits: Mapping[str, str]
    protect_health: bool
    max_in_flight: int
    max_queue: int
    model_limits: Mapping[str, int]
    max_queue_wait_s: float
    client_uploads: int
    client_request_memory_mb: float
    max_request_memory_mb: float | None
    connection_reply_memory_mb: float
    client_reply_memory_mb: float
    max_reply_memory_mb: float | None
    reply_write_timeout_s: float
