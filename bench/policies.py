"""Policies on uneven workers: a real loopback cluster, synthetic workers of mixed speed, open-loop load.

Two workers run at full speed and two at a quarter (an A100 next to a T4), with heavy-tailed
(lognormal) service times. Each policy is offered 50%, 80% and 95% of what the four workers complete
(121.9 req/s), each cell on a fresh gateway once every worker is idle and measured after a warm-up at
its load (as the simulator's four_workers scenario measures its cells); the table gives
throughput, latency percentiles, each worker's share and utilisation, and how often a worker sat
idle while another had work queued.

    python bench/policies.py [--duration 20] [--policies round_robin,p2c,...] [--markdown out.md]

At 80% and 95% a queue swings over tens of seconds, so a cell there needs longer than one at 50% to be
repeatable: `--duration 30 --duration-at 0.8=120,0.95=120` gives those loads 120 s each and the others 30 s
(the table's last column says each cell's length, which `bench/sim_validate.py` simulates it at).

With `--same-draws four_workers` the cells send the arrivals the simulator draws for that scenario at
`--seed`, from the same clients; each cell restarts the workers so they draw the simulator's service
times, worker by worker, and the policies' random draws are seeded alike (common random numbers): the
table then differs from `depthserve sim four_workers --seed S --duration WARMUP+DURATION` by the
simulator's error and the machine's timing, not by another draw of the dice. With a copy of the scenario
that `bench/sim_calibrate.py --out today.yaml` wrote (`--same-draws today.yaml`), loads are shares of what
the workers complete on this machine now, at the own time it measured, not at the 0.6 ms of 2026-12-06.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from depthserve.sim.arrivals import arrivals
from depthserve.sim.command import resolve
from depthserve.sim.scenario import Scenario, load_scenario
from depthserve.testing.load import LoadStats, open_loop
from depthserve.testing.processes import Proc, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image

SPEEDS = (1.0, 1.0, 0.25, 0.25)
DEFAULT_POLICIES = (
    "round_robin",
    "weighted_round_robin",
    "weighted_round_robin@auto",
    "random",
    "ip_hash",
    "least_connections",
    "least_latency",
    "p2c",
    "score",
    "round_robin+queue",
    "least_latency+queue",
    "p2c+queue",
)
LOADS = (0.5, 0.8, 0.95)
# A synthetic worker's own time per request beside its service sleep (a 20 ms worker kept busy through the
# gateway completes 48.4-48.7 req/s: 20.6 ms a request), the four_workers scenario's overhead_ms: loads are
# shares of what the workers complete.
WORKER_OWN_MS = 0.6
# One gateway process, as the simulator runs: a default gateway here runs one per core, each balancing its own
# share of the connections on its own view of in-flight counts and latencies, which is another policy than the
# one simulated (least latency's 95% cell read 165 ms with two and 201 with one, a run each, 2026-12-07).
GATEWAY_FLAGS = ("--processes", "1")


@dataclass
class Cell:
    """One policy at one offered load."""

    policy: str
    load: float
    stats: LoadStats
    shares: list[float]
    utilisation: list[float]
    idle_while_queued: float
    seconds: float  # the measured window it was offered load for


async def sample_idle_while_queued(
    url: str, service_s: dict[str, float], stop: asyncio.Event, period_s: float = 0.1
) -> float:
    """Fraction of samples where a worker sat idle while a request queued elsewhere would have been done sooner on it.

    A sample counts when worker i has nothing in flight and some worker j has a request whose wait there,
    (in_flight_j - 1) x S_j, exceeds S_i, the idle worker's service time: work queued behind a busy worker
    that the idle one would have finished first. Leaving a slow worker idle while a fast one has a short
    queue is not waste, so raw queue lengths are not compared. With a gateway queue (`+queue`), a sample
    also counts when any worker is idle while a request waits in the gateway.
    """
    hits = total = 0
    async with httpx.AsyncClient(timeout=5) as client:
        while not stop.is_set():
            view = (await client.get(f"{url}/v1/cluster")).json()
            backends = view["backends"]
            idle = [service_s[b["address"]] for b in backends if b["in_flight"] == 0]
            waits = [(b["in_flight"] - 1) * service_s[b["address"]] for b in backends if b["in_flight"] >= 2]
            total += 1
            hits += bool(idle and ((waits and max(waits) > min(idle)) or view.get("waiting_for_backend", 0)))
            await asyncio.sleep(period_s)
    return hits / total if total else 0.0


async def wait_idle(url: str, timeout_s: float = 180.0) -> float:
    """Wait until no worker holds work (the gateway sends none, their fresh load reports show none queued or
    running), so a cell starts on empty queues, as the simulator's cells do; give the seconds waited.

    A saturating cell leaves seconds of backlog on the slow workers; without this the next cell (or the
    next policy's first) would be measured on top of it.
    """
    started = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() - started < timeout_s:
            backends = (await client.get(f"{url}/v1/cluster")).json()["backends"]
            loads = [b["load"] for b in backends]
            fresh = all(b["load_age_s"] is not None and b["load_age_s"] < 1.5 for b in backends)
            if (
                fresh
                and all(b["in_flight"] == 0 for b in backends)
                and all(load["queue"] == 0 and load["running"] == 0 for load in loads)
            ):
                return time.monotonic() - started
            await asyncio.sleep(0.2)
    raise SystemExit(f"workers still busy after {timeout_s:.0f} s")


async def served_by(url: str) -> dict[str, int]:
    async with httpx.AsyncClient(timeout=5) as client:
        return {b["address"]: b["served"] for b in (await client.get(f"{url}/v1/cluster")).json()["backends"]}


async def run_cell(
    url: str,
    policy: str,
    load: float,
    capacity: float,
    addresses: list[str],
    service_s: list[float],
    body: bytes,
    duration: float,
    warmup: float,
    seed: int,
    schedule: list[tuple[float, int]] | None = None,
) -> Cell:
    rate = load * capacity
    offered = asyncio.create_task(
        open_loop(
            f"{url}/v1/depth", body, rate=rate, duration_s=duration, seed=seed, warmup_s=warmup, schedule=schedule
        )
    )
    await asyncio.sleep(warmup)  # shares, utilisation and idle samples cover the measured window, as the stats do
    before = await served_by(url)
    stop = asyncio.Event()
    sampler = asyncio.create_task(sample_idle_while_queued(url, dict(zip(addresses, service_s, strict=True)), stop))
    stats = await offered
    stop.set()
    idle = await sampler
    after = await served_by(url)
    done = [after[a] - before[a] for a in addresses]
    shares = [d / max(1, sum(done)) for d in done]
    wall = stats.duration_s
    utilisation = [min(1.0, d * s / wall) for d, s in zip(done, service_s, strict=True)]
    return Cell(policy, load, stats, shares, utilisation, idle, duration)


def gateway_args(policy: str, addresses: list[str]) -> tuple[list[str], list[str]]:
    """Backends and flags for a policy; weighted round robin gets the known 4:4:1:1 speeds as weights.

    A name ending in `@auto` runs the policy with weights measured from the workers' load reports; one
    ending in `+queueN` caps each worker at N requests in flight (`+queue`: 1), the rest waiting in the gateway.
    """
    if "+queue" in policy:
        name, cap = policy.split("+queue")
        backends, flags = gateway_args(name, addresses)
        return backends, [*flags, "--max-outstanding-per-backend", cap or "1"]
    if policy.endswith("@auto"):
        return addresses, ["--policy", policy.removesuffix("@auto"), "--auto-weights"]
    if policy == "weighted_round_robin":
        return [f"{a}@{speed * 4:g}" for a, speed in zip(addresses, SPEEDS, strict=True)], ["--policy", policy]
    return addresses, ["--policy", policy]


def is_bench_fleet(scenario: Scenario, service_ms: float) -> bool:
    """Whether a scenario's fleet is this bench's: its workers' speeds, `service_ms` at full speed, one slot."""
    speeds = tuple(entry.speed for entry in scenario.fleet for _ in range(entry.count))
    return speeds == SPEEDS and (scenario.worker.fixed_ms, scenario.worker.max_batch) == (service_ms, 1)


@dataclass(frozen=True)
class SameDraws:
    """The simulator's scenario whose random draws the live cells replay (`--same-draws`)."""

    scenario: Scenario

    @classmethod
    def of(cls, name: str, seed: int, warmup: float, service_ms: float) -> SameDraws:
        """The scenario at this seed and warm-up; its fleet must be this bench's."""
        scenario = load_scenario(resolve(name)).model_copy(update={"seed": seed, "warmup_s": warmup})
        if not is_bench_fleet(scenario, service_ms):
            raise SystemExit(f"--same-draws {name}: not this bench's fleet ({SPEEDS}, {service_ms} ms, one slot)")
        return cls(scenario)

    def ports(self) -> list[int]:
        """The scenario's worker ports: IP hash's ring is drawn from the addresses."""
        return [int(a.rsplit(":", 1)[1]) for entry in self.scenario.fleet for a in entry.addresses or []]

    def noise(self) -> list[str]:
        """Each worker's random stream, as the simulator's world names them."""
        kinds = [entry.kind.lower() for entry in self.scenario.fleet for _ in range(entry.count)]
        return [f"{self.scenario.seed}:{kind}-{index:04d}:50051" for index, kind in enumerate(kinds)]

    def schedule(self, load: float, duration: float) -> list[tuple[float, int]]:
        """The simulator's arrivals at this load for a cell this long: (seconds from the start, client index)."""
        scenario = self.scenario.model_copy(update={"duration_s": self.scenario.warmup_s + duration})
        return [(arrival.at, arrival.client) for arrival in arrivals(scenario, load)]


def seconds_per_load(text: str) -> dict[float, float]:
    """`--duration-at 0.8=120,0.95=120`: the loads whose cells run longer than --duration, and for how long."""
    lengths: dict[float, float] = {}
    for item in filter(None, text.split(",")):
        load, _, seconds = item.partition("=")
        try:
            length = float(seconds)
            lengths[round(float(load), 4)] = length
        except ValueError:
            length = 0.0
        if length <= 0:
            raise argparse.ArgumentTypeError(f"{item!r}: expected LOAD=SECONDS with SECONDS > 0, e.g. 0.8=120")
    return lengths


def start_workers(
    logs: Path, service_ms: float, ports: list[int | None], noise: list[tuple[str, str]]
) -> tuple[list[Proc], list[str]]:
    """The four synthetic workers; `noise` is each one's flag naming its service-time random stream."""
    workers: list[Proc] = []
    addresses: list[str] = []
    for index, speed in enumerate(SPEEDS):
        proc, address = start_worker(
            logs,
            "--model",
            "synthetic",
            "--synthetic-ms",
            str(service_ms),
            "--speed",
            str(speed),
            "--synthetic-dist",
            "lognormal",
            "--synthetic-sigma",
            "1.0",
            *noise[index],
            "--warmup-requests",
            "0",  # a synthetic worker needs none, and none takes a draw from its stream
            "--queue-limit",
            "256",
            port=ports[index],
            name=f"worker{index}",
        )
        workers.append(proc)
        addresses.append(address)
    return workers, addresses


def render(cells: list[Cell], markdown: Path | None) -> None:
    table = Table(title="policies on 2 fast + 2 quarter-speed synthetic workers (lognormal, sigma 1)")
    columns = (
        "policy",
        "load",
        "ok/s",
        "failed",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "share fast/slow",
        "util min-max",
        "idle while queued",
        "seconds",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "policy" else "right")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for cell in cells:
        s = cell.stats
        fast = sum(cell.shares[:2])
        row = [
            cell.policy,
            f"{cell.load:.0%}",
            f"{s.throughput:.1f}",
            str(s.failed),
            f"{s.percentile(50):.0f}",
            f"{s.percentile(95):.0f}",
            f"{s.percentile(99):.0f}",
            f"{fast:.0%}/{1 - fast:.0%}",
            f"{min(cell.utilisation):.0%}-{max(cell.utilisation):.0%}",
            f"{cell.idle_while_queued:.0%}",
            f"{cell.seconds:g}",
        ]
        table.add_row(*row)
        lines.append("| " + " | ".join(row) + " |")
    Console(width=200).print(table)
    rr = {c.load: c.stats.percentile(99) for c in cells if c.policy == "round_robin"}
    if 0.8 in rr:
        best = min(
            (c for c in cells if c.load == 0.8 and c.policy != "round_robin"),
            key=lambda c: c.stats.percentile(99),
            default=None,
        )
        if best is not None:
            ratio = best.stats.percentile(99) / rr[0.8]
            note = f"At 80% load the best policy ({best.policy}) has p99 {ratio:.2f}x round robin's."
            Console().print(note)
            lines += ["", note]
    if markdown is not None:
        markdown.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per cell")
    parser.add_argument(
        "--duration-at",
        type=seconds_per_load,
        default={},
        metavar="LOAD=SECONDS,...",
        help="cells at these loads run this long instead of --duration: 0.8=120,0.95=120",
    )
    parser.add_argument("--service-ms", type=float, default=20.0, help="mean service time of a full-speed worker")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument("--loads", default=",".join(str(x) for x in LOADS))
    parser.add_argument("--markdown", type=Path)
    parser.add_argument(
        "--warmup",
        type=float,
        default=2.0,
        help="seconds of load before each cell's measured window (its requests are not counted); the "
        "four_workers scenario's warmup_s",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="draws the arrivals: another seed, another run of the same cells"
    )
    parser.add_argument(
        "--ports",
        help="the four workers' ports (default: free ones). IP hash's ring is drawn from the workers' addresses: "
        "50461,50462,50463,50464 gives the ring of the simulator's four_workers scenario",
    )
    parser.add_argument(
        "--same-draws",
        metavar="SCENARIO",
        help="replay the simulator's draws of this scenario (a shipped name or a YAML file) at --seed: its arrivals "
        "and clients, each worker's service times (workers restarted per cell), the policies' random picks",
    )
    args = parser.parse_args()
    same = SameDraws.of(args.same_draws, args.seed, args.warmup, args.service_ms) if args.same_draws else None
    loads = [float(x) for x in args.loads.split(",")]
    unknown = sorted(set(args.duration_at) - {round(load, 4) for load in loads})
    if unknown:
        parser.error(f"--duration-at names loads not in --loads: {', '.join(f'{x:g}' for x in unknown)}")
    ports: list[int | None] = [int(port) for port in args.ports.split(",")] if args.ports else [None] * len(SPEEDS)
    if same is not None and not args.ports:
        ports = [*same.ports()] or ports
    if len(ports) != len(SPEEDS):
        parser.error(f"--ports: {len(SPEEDS)} ports, one per worker")
    noise = (
        [("--synthetic-noise", n) for n in same.noise()] if same else [("--seed", str(i)) for i in range(len(SPEEDS))]
    )
    service_s = [args.service_ms / 1000.0 / speed for speed in SPEEDS]
    # Loads are shares of what the workers complete: the scenario's own time when its draws are replayed (a
    # calibrated copy, bench/sim_calibrate.py, sends its rates), else the one calibrated on 2026-12-06.
    own_s = (same.scenario.worker.overhead_ms if same is not None else WORKER_OWN_MS) / 1000.0
    capacity = sum(1.0 / (s + own_s) for s in service_s)
    body = png_bytes(seeded_image(64, 64))
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        workers: list[Proc] = []
        try:
            workers, addresses = start_workers(logs, args.service_ms, ports, noise)
            for policy in args.policies.split(","):
                for load in loads:
                    seconds = args.duration_at.get(round(load, 4), args.duration)
                    if same is not None and cells:  # each cell's workers draw their streams from the start
                        for proc in workers:
                            proc.stop()
                        workers, addresses = start_workers(logs, args.service_ms, ports, noise)
                    backends, flags = gateway_args(policy, addresses)
                    if same is not None:
                        # The policies draw as the simulator's do; every worker at full weight from the start, as
                        # the simulated ones, which all turn ready at the same instant, ramp alike.
                        flags += ["--policy-seed", str(same.scenario.seed), "--slow-start-s", "0"]
                    # each cell from a cold start, as simulated
                    gateway, url = start_gateway(logs, backends, *flags, *GATEWAY_FLAGS)
                    try:
                        waited = asyncio.run(wait_idle(url))
                        print(
                            f"{policy} at {load:.0%} of {capacity:.0f} req/s for {seconds:g} s "
                            f"(workers idle after {waited:.1f} s) ...",
                            file=sys.stderr,
                            flush=True,
                        )
                        cell = asyncio.run(
                            run_cell(
                                url,
                                policy,
                                load,
                                capacity,
                                addresses,
                                service_s,
                                body,
                                seconds,
                                args.warmup,
                                seed=args.seed * 1000 + int(load * 100),
                                schedule=same.schedule(load, seconds) if same is not None else None,
                            )
                        )
                        cells.append(cell)
                    finally:
                        gateway.stop()
        finally:
            for proc in workers:
                proc.stop()
    render(cells, args.markdown)


if __name__ == "__main__":
    main()
