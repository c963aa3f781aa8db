"""The few types every policy, the gateway and the simulator share; policies import nothing else."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, ClassVar, Protocol, runtime_checkable

from depthserve.protocol.load_report import LoadReport

MIN_WEIGHT, MAX_WEIGHT = 1e-6, 1e6  # positive weights are clamped here, so costs and sums stay finite


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


class View(Protocol):
    """What a policy may read of one backend: the frozen BackendView, or a gateway view reading live counters."""

    @property
    def id(self) -> str: ...  # noqa: D102

    @property
    def weight(self) -> float: ...  # noqa: D102

    @property
    def in_flight(self) -> int: ...  # noqa: D102

    @property
    def ewma_ms(self) -> float: ...  # noqa: D102

    @property
    def peak_ewma_ms(self) -> float: ...  # noqa: D102

    @property
    def error_rate(self) -> float: ...  # noqa: D102

    @property
    def load(self) -> LoadReport | None: ...  # noqa: D102


class Table:
    """One pool's eligible backends, split once into serving (weight > 0, with weights) and drained.

    Built when the pool changes (membership, health, weights), never per request, so a policy reads the
    split, the cumulative weights and a view by its id without walking the backends. Weight <= 0 means
    "drain" (as in HAProxy): no new traffic while any backend has a positive weight; if all are drained,
    all serve at weight 1. Policies may cache what they derive from a table by its identity.
    """

    __slots__ = ("backends", "serving", "weights", "drained", "cumulative", "total_weight", "by_id")

    def __init__(self, backends: Sequence[View]) -> None:
        self.backends: tuple[View, ...] = tuple(backends)
        serving: list[View] = []
        weights: list[float] = []
        drained: list[View] = []
        for backend in self.backends:
            weight = backend.weight
            if weight > 0:  # NaN and <= 0 drain
                serving.append(backend)
                weights.append(min(max(weight, MIN_WEIGHT), MAX_WEIGHT))
            else:
                drained.append(backend)
        if not serving:
            serving, weights, drained = drained, [1.0] * len(drained), []
        self.serving: tuple[View, ...] = tuple(serving)
        self.weights: tuple[float, ...] = tuple(weights)
        self.drained: tuple[View, ...] = tuple(drained)
        self.cumulative: tuple[float, ...] = tuple(accumulate(weights))  # for weighted draws by bisection
        self.total_weight = self.cumulative[-1] if self.cumulative else 0.0
        self.by_id = {backend.id: backend for backend in self.backends}


EMPTY_TABLE = Table(())


class Snapshot:
    """The eligible backends at time `now` (seconds, from the caller's clock): a table and the moment of the pick."""

    __slots__ = ("table", "now")

    def __init__(self, backends: Sequence[View] = (), now: float = 0.0, table: Table | None = None) -> None:
        self.table = table if table is not None else Table(backends) if backends else EMPTY_TABLE
        self.now = now

    @property
    def backends(self) -> tuple[View, ...]:
        """Every eligible backend, in the pool's order."""
        return self.table.backends


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

    def pick(self, snapshot: Snapshot, request: RequestInfo, limit: int | None = None) -> tuple[str, ...]:
        """Return at most `limit` backend ids (None: all), best first, each at most once; never block, no I/O.

        A pick costs O(limit) where the policy allows (round robin, p2c, hashing), so a request's policy
        work does not grow with the pool.
        """
        ...


@runtime_checkable
class Learner(Protocol):
    """A policy that learns from how its picks ended; the gateway tells it on every call's outcome path."""

    def observe(self, backend: str, ok: bool, latency_ms: float, backlog: int, now: float) -> None:
        """One call on `backend` ended: with a reply after `latency_ms` (ok) or the backend's failure;
        `backlog` is the gateway's in-flight count there as it ended."""
        ...


@runtime_checkable
class Binding(Protocol):
    """A policy that can bind a request to one backend by the request alone (a hash key), before it is admitted,
    so the gateway caps the request by that backend's capacity instead of the whole pool's."""

    def bound(self, snapshot: Snapshot, request: RequestInfo) -> str | None:
        """The backend `pick` would put first for this request whatever the load, or None when that depends on
        more than the request (no key, a load bound); like `pick`, no I/O, and it draws nothing random."""
        ...


class PolicyFactory(Protocol):
    """Builds a policy from validated options; registered under the policy's name."""

    name: ClassVar[str]

    @classmethod
    def from_config(cls, options: Mapping[str, Any], seed: int | None = None) -> Policy:
        """Validate and clamp options (raising ValueError naming the bad one) and build the policy."""
        ...
