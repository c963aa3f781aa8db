"""Every tunable of a worker and a gateway, with its default, in one typed place.

Values come, highest first, from command-line flags, `DEPTHSERVE_WORKER_*` /
`DEPTHSERVE_GATEWAY_*` environment variables, a YAML file given with `--config`, then the
defaults below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from depthserve.settings_groups import JobFields, LogFields, VideoFields

__all__ = ["GatewaySettings", "JobFields", "LogFields", "VideoFields", "WeightsSettings", "WorkerSettings"]
DEFAULT_MODEL_NAME = "lingbot-depth"


def _split_ints(value: Any) -> Any:
    if isinstance(value, str):
        return [int(item) for item in value.split(",") if item.strip()]
    return value


class WorkerSettings(BaseSettings, LogFields, JobFields):
    """How a worker serves its model over gRPC."""

    model_config = SettingsConfigDict(env_prefix="DEPTHSERVE_WORKER_", extra="forbid")

    host: str = Field("127.0.0.1", description="address the gRPC server binds")
    port: int = Field(50051, ge=0, le=65535, description="gRPC port (0 picks a free one)")
    model: Literal["tiny", "vitl14", "synthetic"] = Field("tiny", description="which network to run")
    name: str = Field(DEFAULT_MODEL_NAME, description="model name clients and the gateway ask for")
    checkpoint: str | None = Field(None, description="model.pt / .safetensors path or HF repo id (vitl14)")
    device: str = Field(
        "auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$", description="torch device: auto picks cuda when present, else cpu"
    )
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's own choice)")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto",
        description="compute precision (autocast); auto: on a GPU the fastest within precision_tolerance of fp32, "
        "checked at warm-up on a fixed input; on a CPU fp32",
    )
    precision_tolerance: float = Field(
        0.02, gt=0, description="bound on the p99 relative depth difference from fp32 that auto accepts (0.02 = 2%)"
    )
    pipeline_depth: int | None = Field(
        None,
        ge=1,
        le=4,
        description="batches in flight on the device: the next is copied in while one computes (default 2 on a GPU, "
        "1 on a CPU)",
    )
    queue_limit: int = Field(64, ge=1, description="requests waiting for the device before RESOURCE_EXHAUSTED")
    max_batch_size: int = Field(
        1, ge=1, le=1024, description="most requests run as one batch (1 = no batching; 8-16 suit a GPU)"
    )
    batching: Literal["fixed", "adaptive"] = Field(
        "adaptive", description="fixed: close a batch at max_queue_delay_ms; adaptive: wait only when it pays"
    )
    max_queue_delay_ms: float = Field(0.0, ge=0, description="fixed mode: longest the oldest request waits")
    target_latency_ms: float = Field(
        100.0, gt=0, description="adaptive mode: a held batch must still finish within this of its oldest arrival"
    )
    max_batch_pixels: int = Field(
        32_000_000, ge=1, description="most image pixels in one batch, so large images run in smaller batches"
    )
    max_concurrent_batches: int = Field(1, ge=1, le=16, description="batches on the device at once")
    low_priority_delay_ms: float = Field(
        1000.0,
        ge=0,
        description="a low-priority request (OIP parameter priority >= 2: the gateway's video frames) is queued "
        "as if it arrived this much later: requests arriving meanwhile go first, none waits forever",
    )
    max_message_mb: int = Field(64, ge=1, description="largest gRPC message accepted or sent, MiB")
    max_pixels: int = Field(40_000_000, ge=1, description="largest decoded image accepted, pixels")
    max_aspect_ratio: float = Field(
        16.0, ge=1, description="widest image accepted, long side over short side (the token grid's cost)"
    )
    warmup_requests: int = Field(1, ge=0, description="inferences per warm-up level before reporting ready")
    warmup_levels: list[int] = Field(default_factory=lambda: [0, 9], description="resolution levels warmed up")
    drain_notice_s: float = Field(
        3.0, ge=0, description="on SIGTERM, keep serving while NOT_SERVING until gateways stop sending (or this)"
    )
    drain_quiet_s: float = Field(0.5, ge=0, description="end the notice early after this long with no request")
    drain_seconds: float = Field(10.0, ge=0, description="then the grace period for in-flight requests")
    synthetic_ms: float = Field(20.0, ge=0, description="synthetic model: base service time per batch")
    synthetic_per_item_ms: float = Field(0.0, ge=0, description="synthetic model: extra time per batch item")
    synthetic_dist: Literal["const", "exp", "lognormal"] = Field("const", description="synthetic time shape")
    synthetic_sigma: float = Field(0.5, gt=0, le=3, description="synthetic lognormal shape (1.0 = heavy tail)")
    synthetic_noise: str = Field(
        "",
        description="names the synthetic service times' random stream in place of --seed; the simulator's worker "
        "N of kind K draws from 'SEED:K-NNNN:50051', so a live worker given that name draws the same noise",
    )
    speed: float = Field(1.0, gt=0, description="synthetic model: divides every service time (faster GPU)")
    synthetic_mem_gb: float = Field(80.0, gt=0, description="synthetic model: reported accelerator memory")
    memory_budget_fraction: float = Field(
        0.9, gt=0, le=1, description="refuse work that would take device memory past this share of the total"
    )
    tls_cert: Path | None = Field(None, description="serve gRPC over TLS with this certificate")
    tls_key: Path | None = Field(None, description="its private key")
    tls_ca: Path | None = Field(None, description="require client certificates signed by this CA (mutual TLS)")
    seed: int = Field(0, description="seed for synthetic service times")
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="HTTP port serving Prometheus /metrics (0 picks a free one; unset = off)"
    )
    version: str = Field("1", description="model version this worker serves, as registered for gateways")
    discovery: str | None = Field(
        None, description="registry to join after warm-up: redis://HOST:PORT[/DB] or etcd://HOST:PORT[/PREFIX]"
    )
    advertise: str | None = Field(
        None, description="HOST[:PORT] gateways should dial (default: bound host, or the address facing the registry)"
    )
    weight: float | None = Field(None, gt=0, description="static weight registered for gateways (default: auto)")
    registry_ttl_s: float = Field(5.0, gt=0, description="registry entry lifetime; heartbeats renew it every third")
    job_concurrency: int = Field(4, ge=1, description="jobs this worker pulls and runs at once (its prefetch)")

    @field_validator("warmup_levels", mode="before")
    @classmethod
    def _split_levels(cls, value: Any) -> Any:
        return _split_ints(value)

    @field_validator("warmup_levels")
    @classmethod
    def _check_levels(cls, value: list[int]) -> list[int]:
        if any(not 0 <= level <= 9 for level in value):
            raise ValueError("warm-up levels must be between 0 and 9")
        return value


class PolicyConfig(BaseModel):
    """A load-balancing policy by name with its options."""

    model_config = ConfigDict(extra="forbid")

    name: str
    options: dict[str, Any] = Field(default_factory=dict)


class HeaderMatchConfig(BaseModel):
    """Route requests whose header equals a value to one version."""

    model_config = ConfigDict(extra="forbid")

    header: str
    value: str
    version: str


class VersionRouteConfig(BaseModel):
    """How one model's traffic is split over its versions: by weight (canary) and by header."""

    model_config = ConfigDict(extra="forbid")

    weights: dict[str, float] = Field(default_factory=dict, description="version -> share, e.g. {v1: 90, v2: 10}")
    header: str = Field("X-Model-Version", description="a request naming a version in this header gets it")
    match: list[HeaderMatchConfig] = Field(default_factory=list, description="header rules, first match wins")

    @field_validator("weights")
    @classmethod
    def _check_weights(cls, value: dict[str, float]) -> dict[str, float]:
        if any(weight < 0 for weight in value.values()):
            raise ValueError("version weights must not be negative")
        if value and not any(weight > 0 for weight in value.values()):
            raise ValueError("at least one version weight must be positive")
        return value


class GatewaySettings(BaseSettings, LogFields, JobFields, VideoFields):
    """How the gateway listens and reaches its workers."""

    model_config = SettingsConfigDict(env_prefix="DEPTHSERVE_GATEWAY_", extra="forbid")

    host: str = Field("127.0.0.1", description="address the HTTP server binds")
    port: int = Field(8000, ge=0, le=65535, description="HTTP/1.1 + HTTP/2 (h2c) port")
    grpc_port: int | None = Field(
        None, ge=1, le=65535, description="OIP v2 gRPC port (inference.GRPCInferenceService) [off]"
    )
    processes: int | None = Field(
        None,
        ge=1,
        le=64,
        description="gateway processes sharing the port, each balancing on its own view of the pool "
        "[one per core, at most 8; 1 with the in-process job queue]",
    )
    backends: list[str] = Field(default_factory=list, description="worker addresses HOST:PORT[@WEIGHT|@auto]")
    auto_weights: bool = Field(False, description="weigh backends without @WEIGHT by measured throughput")
    policy: str = Field("round_robin", description="load-balancing policy for models without their own")
    policy_options: dict[str, Any] = Field(default_factory=dict, description="options of the default policy")
    policies: dict[str, PolicyConfig] = Field(
        default_factory=dict, description="per model name: {name, options} overriding the default policy"
    )
    max_report_age_s: float = Field(5.0, gt=0, description="older load reports count as unknown, not idle")
    peak_decay_s: float = Field(10.0, gt=0, description="time constant of peak-EWMA latency decay")
    model: str = Field(DEFAULT_MODEL_NAME, description="model used when a request names none")
    request_timeout_s: float = Field(30.0, gt=0, description="deadline of a request, end to end")
    max_body_mb: float = Field(32.0, gt=0, description="largest request body accepted, MiB")
    max_message_mb: int = Field(64, ge=1, description="largest gRPC message to or from a worker, MiB")
    max_request_timeout_s: float = Field(300.0, gt=0, description="largest X-Request-Timeout a client may ask")
    health_interval_s: float = Field(1.0, gt=0, description="how often each backend's health is checked (+-20%)")
    health_timeout_s: float = Field(1.0, gt=0, description="timeout of one health check")
    unhealthy_threshold: int = Field(2, ge=1, description="failed checks in a row that take a backend out")
    healthy_threshold: int = Field(2, ge=1, description="passed checks in a row that bring it back")
    probe_timeout_s: float = Field(10.0, gt=0, description="timeout of the inference probe (a real forward)")
    probe_inference_every: int = Field(
        5, ge=0, description="every Nth check also runs a tiny real inference (0 = gRPC health only)"
    )
    consecutive_errors: int = Field(5, ge=1, description="failures in a row on real traffic that eject a backend")
    base_ejection_s: float = Field(30.0, gt=0, description="first ejection length; multiplied per ejection")
    max_ejection_s: float = Field(300.0, gt=0, description="longest ejection")
    max_ejection_percent: float = Field(50.0, ge=0, le=100, description="most backends ejected at once (min 1)")
    panic_threshold_percent: float = Field(
        50.0, ge=0, le=100, description="below this share of non-ejected backends, ejections are ignored"
    )
    slow_start_s: float = Field(5.0, ge=0, description="traffic ramp for a newly ready backend (weight-aware)")
    max_outstanding_per_backend: int = Field(
        0, ge=0, description="requests at one backend at once; more wait in the gateway for a free one (0 = no cap)"
    )
    max_attempts: int = Field(3, ge=1, description="tries of one request, on different backends")
    per_try_timeout_s: float = Field(10.0, gt=0, description="deadline of one attempt (within the request's)")
    retry_budget_percent: float = Field(20.0, ge=0, le=100, description="retries allowed as a share of active")
    min_retry_concurrency: int = Field(3, ge=0, description="retries always allowed in flight at once")
    max_in_flight: int = Field(256, ge=1, description="requests the gateway forwards at once, all models")
    model_limits: dict[str, int] = Field(default_factory=dict, description="per model name: its in-flight cap")
    max_queue: int = Field(512, ge=0, description="requests waiting for admission before 503 queue_full")
    max_queue_wait_s: float = Field(
        5.0, gt=0, description="refuse at once (503 queue_full) a request expected to wait longer than this in queue"
    )
    rate_limit: str | None = Field(None, description="default per-key/per-address limit, e.g. '50/s burst 100'")
    rate_limits: dict[str, str] = Field(default_factory=dict, description="per API key name: its rate limit")
    api_keys_file: Path | None = Field(None, description="file of NAME:SHA256 or NAME:plain:KEY lines")
    protect_health: bool = Field(False, description="require an API key on /healthz, /readyz, /v1/cluster too")
    protect_observability: bool = Field(
        False, description="require an API key on /metrics, /dashboard, /v1/cluster (loopback only without keys)"
    )
    admin_keys_file: Path | None = Field(
        None, description="admin keys (api_keys_file's format) for drain/undrain; without any, loopback only"
    )
    upload_timeout_s: float = Field(30.0, gt=0, description="longest a client may take to send its body (408)")
    client_uploads: int = Field(256, ge=1, description="request bodies one client may be sending at once (429 beyond)")
    client_request_memory_mb: float = Field(
        512.0, gt=0, description="request body bytes one client may have in the gateway at once, MiB (429 beyond)"
    )
    max_request_memory_mb: float | None = Field(
        None, gt=0, description="request body bytes held at once, all clients, MiB (503 beyond) [1/8 of memory]"
    )
    connection_reply_memory_mb: float = Field(
        64.0, gt=0, description="unread reply bytes one connection may hold, MiB (new requests on it get 503 beyond)"
    )
    client_reply_memory_mb: float = Field(
        128.0, gt=0, description="unread reply bytes all connections of one client address may hold, MiB (503 beyond)"
    )
    max_reply_memory_mb: float | None = Field(
        None, gt=0, description="unread reply bytes held at once, all connections, MiB (503 beyond) [1/8 of memory]"
    )
    reply_write_timeout_s: float = Field(
        30.0, gt=0, description="a reply the client reads none of for this long is abandoned and its memory freed"
    )
    max_pixels: int = Field(40_000_000, ge=1, description="largest image accepted (read from its header), pixels")
    max_aspect_ratio: float = Field(
        16.0, ge=1, description="widest image accepted, long side over short side (read from its header)"
    )
    max_parts: int = Field(8, ge=1, description="most multipart parts in one request")
    max_header_kb: int = Field(64, ge=1, description="largest request header block, KiB")
    tls_cert: Path | None = Field(None, description="serve HTTPS (h2 + HTTP/1.1 by ALPN) with this certificate")
    tls_key: Path | None = Field(None, description="its private key (PKCS#8 PEM)")
    backend_tls_ca: Path | None = Field(None, description="verify workers' gRPC TLS certificates with this CA")
    backend_tls_cert: Path | None = Field(None, description="client certificate for mutual TLS to workers")
    backend_tls_key: Path | None = Field(None, description="its private key")
    hedge: bool = Field(False, description="send a second attempt when the first is slower than the pool's p95")
    hedge_min_ms: float = Field(5.0, ge=0, description="never hedge sooner than this")
    ewma_alpha: float = Field(0.3, gt=0, le=1, description="weight of the newest sample in latency EWMA")
    discovery: list[str] = Field(
        default_factory=list,
        description="more backend sources: redis://HOST:PORT, etcd://HOST:PORT/PREFIX, file:///PATH.yaml, dns://NAME:PORT",
    )
    discovery_poll_s: float = Field(
        1.0, gt=0, description="how often file, Redis and DNS sources are read (etcd is watched, not polled)"
    )
    versions: dict[str, VersionRouteConfig] = Field(
        default_factory=dict, description="per model: version split and header routing (hot-reloaded from --config)"
    )
    version_seed: int | None = Field(None, description="seed of the version split's random draws (reproducible runs)")
    policy_seed: int | None = Field(
        None, description="seed of the policies' random draws (random, p2c): reproducible runs, the simulator's draws"
    )
    config_file: Path | None = Field(None, description="the --config file, watched to reload `versions`")
    job_concurrency: int = Field(4, ge=1, description="in-process broker: jobs the gateway runs at once")
    scale_min_workers: int = Field(1, ge=0, description="autoscaling signal: fewest workers a model pool is given")
    scale_max_workers: int = Field(64, ge=1, description="autoscaling signal: most workers a model pool is given")
    scale_target_utilization: float = Field(
        0.7, gt=0, le=1, description="autoscaling signal: busy share each worker should run at"
    )
    scale_tolerance: float = Field(
        0.1, ge=0, lt=1, description="autoscaling signal: demand within this share of the workers changes nothing"
    )
    scale_pending_threshold: int | None = Field(
        None, ge=0, description="autoscaling signal: more requests waiting than this asks one worker more [off]"
    )
    scale_down_window_s: float = Field(
        60.0, ge=0, description="autoscaling signal: a pool shrinks only after wanting fewer workers this long"
    )
    scale_rate_window_s: float = Field(
        5.0, gt=0, description="autoscaling signal: window of the measured completion rate, s"
    )

    @field_validator("backends", "discovery", mode="before")
    @classmethod
    def _split_backends(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value


class WeightsSettings(BaseSettings):
    """Where `depthserve weights download` fetches checkpoints from and where workers find them."""

    model_config = SettingsConfigDict(env_prefix="DEPTHSERVE_WEIGHTS_", extra="forbid")

    repo: str = Field("robbyant/lingbot-depth-pretrain-vitl-14", description="Hugging Face repo of the checkpoint")
    cache_dir: Path = Field(Path("~/.cache/depthserve"), description="downloaded checkpoints, one folder per repo")
    endpoint: str = Field("https://huggingface.co", description="hub serving {repo}/resolve/main/{file}")

    @field_validator("cache_dir")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser().absolute()


SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def load_settings(cls: type[SettingsT], config_file: Path | None = None, **flags: Any) -> SettingsT:
    """Build settings from flags (those not None), environment, an optional YAML file, then defaults."""
    given = {key: value for key, value in flags.items() if value is not None}
    if config_file is None:
        return cls(**given)

    class WithFile(cls):  # type: ignore[valid-type,misc]
        model_config = SettingsConfigDict(**{**cls.model_config, "yaml_file": str(config_file)})

        @classmethod
        def settings_customise_sources(
            cls_,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, YamlConfigSettingsSource(settings_cls)

    return cls(**WithFile(**given).model_dump())
