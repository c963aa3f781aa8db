"""A simulation scenario, as written in YAML: the fleet, the traffic, what happens during the run.

    name: mixed-fleet
    seed: 7
    duration_s: 60
    fleet: [{kind: H200, count: 250}, {kind: A100, count: 250}, {kind: L4, count: 250}, {kind: T4, count: 250}]
    load: 0.8                      # offered load, as a share of the fleet's capacity at full batches
    arrivals: {process: poisson, clients: 500}
    mix: [{level: 9, weight: 3}, {level: 0, weight: 1}]
    events: [{at_s: 20, action: slow, kind: A100, count: 50, factor: 4}]
    policies: [round_robin, weighted_round_robin, ip_hash, score, p2c]

Every field has a default; runs are reproducible from `seed`.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

# Relative speeds of common accelerators on a ViT-L forward pass (bf16), fastest = 2: defaults for `kind`.
KNOWN_KINDS = {"H200": (2.0, 141.0), "H100": (1.8, 80.0), "A100": (1.0, 80.0), "L4": (0.45, 24.0), "T4": (0.25, 16.0)}
TOKENS_AT_LEVEL_9 = 3600


class Strict(BaseModel):
    """Refuses unknown keys, so a typo in a scenario is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid")


class FleetEntry(Strict):
    """Workers of one kind."""

    kind: str
    count: int = Field(1, ge=0)
    speed: float | None = Field(None, gt=0, description="relative speed (default: the kind's, else 1)")
    memory_gb: float | None = Field(None, gt=0)
    weight: float | None = Field(None, gt=0, description="static balancing weight (default: its speed)")
    addresses: list[str] | None = Field(
        None,
        description="the workers' host:port, one each (default: KIND-NNNN:50051); where hashing matters, the "
        "addresses a live cluster uses give the same ring",
    )

    @model_validator(mode="after")
    def _one_address_each(self) -> FleetEntry:
        if self.addresses is not None and len(self.addresses) != self.count:
            raise ValueError(f"{self.kind}: {len(self.addresses)} addresses for {self.count} workers")
        return self

    def resolved_speed(self) -> float:
        """The entry's speed, or its kind's."""
        return self.speed if self.speed is not None else KNOWN_KINDS.get(self.kind, (1.0, 80.0))[0]

    def resolved_memory_gb(self) -> float:
        """The entry's memory, or its kind's."""
        return self.memory_gb if self.memory_gb is not None else KNOWN_KINDS.get(self.kind, (1.0, 80.0))[1]


class WorkerModel(Strict):
    """How every worker serves: its batches and queue, and service time (fixed + per cost unit) / speed."""

    max_batch: int = Field(8, ge=1)
    queue_limit: int = Field(64, ge=1)
    fixed_ms: float = Field(15.0, ge=0, description="a batch's fixed time at speed 1")
    per_cost_ms: float = Field(10.0, ge=0, description="time per cost unit (a level-9 image) at speed 1")
    sigma: float = Field(0.3, ge=0, le=3, description="lognormal shape of each batch's noise (0 = none)")
    network_ms: float = Field(1.0, ge=0, description="round trip gateway-worker-gateway, and the worker's own work")
    overhead_ms: float = Field(
        0.0, ge=0, description="worker time per batch outside the device (not scaled by speed): it cuts capacity"
    )
    rack_size: int = Field(8, ge=1, description="workers per rack, for partitions")


class Burst(Strict):
    """The arrival rate multiplied by `factor` from `at_s` for `for_s`."""

    at_s: float = Field(ge=0)
    for_s: float = Field(gt=0)
    factor: float = Field(gt=0)


class Arrivals(Strict):
    """When requests come and from whom: Poisson at the offered load, with bursts or a diurnal curve."""

    process: Literal["poisson", "diurnal"] = "poisson"
    bursts: list[Burst] = Field(default_factory=list)
    period_s: float = Field(60.0, gt=0, description="diurnal: one day, compressed")
    amplitude: float = Field(0.5, ge=0, lt=1, description="diurnal: rate swings by this share around the mean")
    clients: int = Field(100, ge=1, description="distinct clients (addresses), chosen uniformly")
    first_client: IPv4Address = Field(
        IPv4Address("10.0.0.0"), description="the clients' addresses count up from this one (for ip_hash)"
    )
    sessions: bool = Field(True, description="each client sends its id in x-session-id (for consistent_hash)")


class MixEntry(Strict):
    """A share of the requests at one resolution level (its token grid sets its cost)."""

    level: int = Field(9, ge=0, le=9)
    weight: float = Field(1.0, gt=0)

    @property
    def cost(self) -> float:
        """Cost units: tokens over the tokens of level 9."""
        return (1200 + self.level / 9 * 2400) / TOKENS_AT_LEVEL_9


class Event(Strict):
    """Something that happens to some workers at `at_s`: which ones by kind and count, or by index, or rack."""

    at_s: float = Field(ge=0)
    action: Literal["slow", "recover", "kill", "revive", "hang", "partition", "heal", "join", "drift"]
    kind: str | None = None
    count: int | None = Field(None, ge=1)
    workers: list[int] = Field(default_factory=list)
    rack: int | None = Field(None, ge=0)
    factor: float = Field(4.0, gt=0, description="slow: service times multiplied by this")
    warmup_s: float = Field(10.0, ge=0, description="join: NOT_SERVING this long before serving")
    every_s: float = Field(5.0, gt=0, description="drift: a new slowdown this often, until the end")
    share: float = Field(0.3, gt=0, le=1, description="drift: share of workers whose speed changes each time")


class AutoscaleModel(Strict):
    """The simulated cluster follows the gateway's scaling signal (its bounds and windows: `gateway: scale_*`)."""

    kind: str = Field("A100", description="the kind of worker added")
    interval_s: float = Field(1.0, gt=0, description="how often the signal is read and acted on")
    warmup_s: float = Field(20.0, ge=0, description="a new worker is NOT_SERVING this long (model load, warm-up)")


class Scenario(Strict):
    """One simulated world; `policies` run on the same arrivals (common random numbers)."""

    name: str = "scenario"
    seed: int = 0
    jitter_seed: int | None = Field(
        None,
        description="seed of the gateway's own random timing (its health checks' jitter) apart from `seed`; "
        "the arrivals and the workers' draws stay `seed`'s, as a live cluster replaying the same draws "
        "differs from run to run (default: `seed` alone)",
    )
    duration_s: float = Field(60.0, gt=0)
    warmup_s: float = Field(5.0, ge=0, description="left out of the statistics")
    fleet: list[FleetEntry] = Field(default_factory=lambda: [FleetEntry.model_validate({"kind": "A100", "count": 4})])
    worker: WorkerModel = Field(default_factory=lambda: WorkerModel.model_validate({}))
    load: float = Field(0.8, gt=0, description="offered load, share of the fleet's capacity at full batches")
    loads: list[float] = Field(default_factory=list, description="a sweep of loads (overrides `load`)")
    rate_rps: float | None = Field(None, gt=0, description="offered rate in requests per second (overrides load)")
    arrivals: Arrivals = Field(default_factory=lambda: Arrivals.model_validate({}))
    mix: list[MixEntry] = Field(default_factory=lambda: [MixEntry.model_validate({})])
    request_timeout_s: float = Field(10.0, gt=0)
    edge_ms: float = Field(
        0.0,
        ge=0,
        description="time outside the dispatch path (the client, HTTP parsing and writing), added to "
        "the latency clients see; the gateway's picks never see it",
    )
    slo_s: float = Field(1.0, gt=0, description="goodput counts replies within this")
    gateway: dict[str, Any] = Field(default_factory=dict, description="gateway settings, as in its YAML config")
    events: list[Event] = Field(default_factory=list)
    autoscale: AutoscaleModel | None = None
    policies: list[str] = Field(default_factory=lambda: ["round_robin", "p2c"])
    policy_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="per policy name, its options (as `policy_options` in the gateway's config), e.g. "
        "{score: {sample_size: 16}}",
    )
    weighted: list[str] | None = Field(
        None,
        description="policies given the fleet's static weights; the others see every worker at weight 1, as a "
        "gateway started with a plain --backends list (default: every policy gets them)",
    )

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if not any(entry.count for entry in self.fleet):
            raise ValueError("the fleet has no workers")
        return self

    @property
    def workers(self) -> int:
        """Workers at the start."""
        return sum(entry.count for entry in self.fleet)

    def mean_cost(self) -> float:
        """Mean cost units of a request under the mix."""
        total = sum(entry.weight for entry in self.mix)
        return sum(entry.cost * entry.weight for entry in self.mix) / total

    def capacity_rps(self) -> float:
        """Requests per second the starting fleet completes with every batch full, the workers' own time counted."""
        model = self.worker
        device_s = (model.fixed_ms + model.per_cost_ms * self.mean_cost() * model.max_batch) / 1000.0
        overhead_s = model.overhead_ms / 1000.0
        total = 0.0
        for entry in self.fleet:
            batch_s = device_s / entry.resolved_speed() + overhead_s
            total += entry.count * (model.max_batch / batch_s if batch_s > 0 else float("inf"))
        return total

    def offered_loads(self) -> list[float]:
        """The loads to run: the sweep, else the one load."""
        return list(self.loads) or [self.load]

    def rate_at(self, load: float) -> float:
        """Mean arrivals per second at a load."""
        return self.rate_rps if self.rate_rps is not None else load * self.capacity_rps()


def load_scenario(path: Path) -> Scenario:
    """Read a scenario file (YAML), naming the file in any error."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: {exc}") from None
    try:
        return Scenario.model_validate(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def shipped_scenarios() -> dict[str, Path]:
    """The scenarios that ship with depthserve, by name."""
    folder = Path(__file__).parent / "scenarios"
    return {path.stem: path for path in sorted(folder.glob("*.yaml"))}
