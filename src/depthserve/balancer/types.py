"""The few types every policy, the gateway and the simulator share; policies import nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from depthserve.protocol.load_report import LoadReport


@dataclass(frozen=True)
class BackendView:
    """One eligible backend as a policy sees it at one instant: identity, weight, the gateway's stats, its report.

    `load` is None when the backend sent no report or its last one is older than the pool's maximum
    report age: an unknown load, which policies must not read as idle.
    """

    id: str
    weight: float = 1.0  # effective weight: static (HOST:PORT@W) or measured throughput ("auto")
    in_flight: int = 0  # requests the gateway has sent and not yet seen answered
    ewma_ms: float = 0.0  # EWMA of successful-call latency; 0.0 = no sample yet
    peak_ewma_ms: float = 0.0  # peak-EWMA: jumps to a slower sample at once, decays towards faster ones
    error_rate: float = 0.0  # EWMA of the failure indicator, 0..1
    load: LoadReport | None = None


@dataclass(frozen=True)
class Snapshot:
    """The eligible backends at time `now` (seconds, from the caller's clock)."""

    backends: tuple[BackendView, ...]
    now: float = 0.0


@dataclass(frozen=True)
class RequestInfo:
    """What a policy may know about a request: its model, headers (lower-case names) and client address.

    `version` is the model version the request names itself (OIP `/versions/{v}`); "" lets the
    gateway's version split choose.
    """

    model: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    client: str = ""
    version: str = ""


class Policy(Protocol):
    """Orders candidates for one request; the first is the choice, the rest are fallbacks for retries."""

    name: ClassVar[str]

    def pick(self, snapshot: Snapshot, request: RequestInfo) -> tuple[str, ...]:
        """Return backend ids, best first, each at most once; never block, never do I/O."""
        ...


class PolicyFactory(Protocol):
    """Builds a policy from validated options; registered under the policy's name."""

    name: ClassVar[str]

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> Policy:
        """Validate and clamp options (raising ValueError naming the bad one) and build the policy."""
        ...
