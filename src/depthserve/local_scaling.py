"""`depthserve up --autoscale MIN:MAX`: the local cluster follows the gateway's scaling signal.

Every `poll_s` the scaler reads the gateway's desired worker count for its model (`/v1/cluster`,
`scaling`, the shared rule in `depthserve.scaling`, stabilised by the gateway) and starts or
retires workers to match. A new worker joins only once it is warm: in file mode the scaler lists
it in the gateway's backends file when its gRPC health says SERVING; with a registry the worker
registers itself after warm-up. A worker is retired by drain, never by a kill: in file mode it is
first taken out of the file, and signalled only once the gateway has let go of it (no request of
its in flight); with a registry the signal itself starts the drain (the worker deletes its entry
first, keeps serving while the gateways notice, finishes what it holds). One log line per change.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from rich.console import Console

from depthserve.probes import grpc_serving, listens, port_of

STARTING, SERVING, LEAVING, STOPPING = "starting", "serving", "leaving", "stopping"


class WorkerProcess(Protocol):
    """What the scaler needs of a started worker (local_cluster.Child)."""

    name: str
    retiring: bool

    @property
    def pid(self) -> int:
        """The process id (the worker holds its port's listener itself)."""
        ...

    def terminate(self) -> None:
        """Ask the worker to drain and stop (SIGTERM)."""
        ...

    def exited(self) -> bool:
        """Whether the process has ended."""
        ...


@dataclass
class Managed:
    """One worker under the scaler, and where it is in its life."""

    process: WorkerProcess
    address: str
    state: str = STARTING


def parse_bounds(text: str) -> tuple[int, int]:
    """Read `MIN:MAX` (0 <= MIN <= MAX, MAX >= 1); ValueError with the reason."""
    low, sep, high = text.partition(":")
    if not sep or not low.strip().isdigit() or not high.strip().isdigit():
        raise ValueError(f"--autoscale {text!r} is not MIN:MAX, e.g. 1:4")
    bounds = int(low), int(high)
    if bounds[0] > bounds[1] or bounds[1] < 1:
        raise ValueError(f"--autoscale {text!r}: need MIN <= MAX and MAX >= 1")
    return bounds


class WorkerScaler:
    """Starts and retires local workers to follow the gateway's desired count."""

    def __init__(
        self,
        bounds: tuple[int, int],
        gateway_url: str,
        model: str,
        spawn: Callable[[], tuple[WorkerProcess, str]],
        publish: Callable[[list[str]], None] | None,
        console: Console,
        poll_s: float = 0.5,
    ) -> None:
        self.bounds = bounds
        self.gateway_url = gateway_url
        self.model = model
        self.spawn = spawn
        self.publish = publish  # file mode: write the gateway's backends; None: workers register themselves
        self.console = console
        self.poll_s = poll_s
        self.workers: list[Managed] = []
        self.changes: list[tuple[float, int, int]] = []  # (when, from, to), for tests and benchmarks
        self._next_poll = 0.0

    def adopt(self, process: WorkerProcess, address: str, serving: bool) -> None:
        """Take charge of a worker started with the cluster."""
        self.workers.append(Managed(process, address, SERVING if serving else STARTING))

    def active(self) -> list[Managed]:
        """Workers counted towards the desired number: starting or serving."""
        return [w for w in self.workers if w.state in (STARTING, SERVING)]

    def _publish(self) -> None:
        if self.publish is not None:
            self.publish([w.address for w in self.workers if w.state == SERVING])

    def _cluster(self) -> dict[str, Any] | None:
        try:
            reply = httpx.get(f"{self.gateway_url}/v1/cluster", timeout=2.0)
            return dict(reply.json()) if reply.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None  # a gateway busy or restarting: try again next poll

    def _advance(self, listed: set[str] | None) -> None:
        """Move each worker on: warm ones join, let-go ones are signalled, ended ones are forgotten."""
        changed = False
        for worker in list(self.workers):
            if worker.state == STARTING and self._serving(worker):
                worker.state = SERVING
                changed = True
                self.console.print(f"autoscale: {worker.process.name} warm at {worker.address}, joining")
            elif worker.state == LEAVING and listed is not None and worker.address not in listed:
                worker.state = STOPPING  # the gateway holds nothing of it any more: drain and stop
                worker.process.terminate()
            elif worker.state == STOPPING and worker.process.exited():
                self.workers.remove(worker)
                self.console.print(f"autoscale: {worker.process.name} retired")
        if changed:
            self._publish()

    @staticmethod
    def _serving(worker: Managed) -> bool:
        """Whether a started worker is warm: its port answers health and is its own (not another program's)."""
        return grpc_serving(worker.address, timeout=0.5) and listens(worker.process.pid, port_of(worker.address))

    def _retire(self, worker: Managed) -> None:
        worker.process.retiring = True
        if self.publish is None or worker.state == STARTING:
            worker.state = STOPPING  # never listed (or it deletes its own entry first): signal now
            worker.process.terminate()
        else:
            worker.state = LEAVING

    def tick(self, now: float | None = None) -> None:
        """Called often by the cluster's loop; reads the signal every `poll_s`."""
        now = time.monotonic() if now is None else now
        if now < self._next_poll:
            return
        self._next_poll = now + self.poll_s
        cluster = self._cluster()
        listed = None if cluster is None else {b["address"] for b in cluster.get("backends", [])}
        self._advance(listed)
        pool = (cluster or {}).get("scaling", {}).get("pools", {}).get(self.model)
        if pool is None:
            return
        low, high = self.bounds
        wanted = max(low, min(high, int(pool["desired"])))
        active = self.active()
        if wanted == len(active):
            return
        self.changes.append((now, len(active), wanted))
        self.console.print(
            f"autoscale: {len(active)} -> {wanted} workers (demand {pool['demand']:.2f} at "
            f"{pool.get('workers', 0)} serving, waiting {pool['waiting']}, {pool['completions_per_s']:.1f}/s)"
        )
        if wanted > len(active):
            for _ in range(wanted - len(active)):
                process, address = self.spawn()
                self.workers.append(Managed(process, address))
                self.console.print(f"autoscale: starting {process.name} on {address}")
        else:
            # Retire those still starting first (they hold no traffic), then the newest.
            for worker in sorted(active, key=lambda w: (w.state != STARTING, -self.workers.index(w)))[
                : len(active) - wanted
            ]:
                self._retire(worker)
                self.console.print(f"autoscale: draining {worker.process.name} ({worker.address})")
            self._publish()
