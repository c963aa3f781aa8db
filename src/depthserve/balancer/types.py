"""The few types every policy, the gateway and the simulator share; policies import nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from depthserve.protocol.load_report import LoadReport


@dataclass(frozen=True)
class BackendView:
    """One backend as a policy sees it at one instant: identity, weight, the gateway's stats, its report."""

    id: str
    weight: float = 1.0
    in_flight: int = 0
    ewma_ms: float = 0.0
    load: LoadReport | None = None


@dataclass(frozen=True)
class Snapshot:
    """The eligible backends at time `now` (seconds, from the caller's clock)."""

    backends: tuple[BackendView, ...]
    now: float = 0.0


@dataclass(frozen=True)
class RequestInfo:
    """What a policy may know about a request: its model, headers and client address."""

    model: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    client: str = ""


class Policy(Protocol):
    """Orders candidates for one request; the first is the choice, the rest are fallbacks for retries."""

    name: ClassVar[str]

    def pick(self, snapshot: Snapshot, request: RequestInfo) -> tuple[str, ...]:
        """Return backend ids, best first; never block, never do I/O."""
        ...
