"""Abuse: how normal clients fare while an attacker slow-uploads, leaves replies unread, or offers 5x capacity.

One loopback cluster: two synthetic workers (20 ms per request, 100 req/s together) and a gateway with
its default admission limits, a 5 s request deadline and a 5 s upload timeout (--request-timeout-s,
--upload-timeout-s; any other gateway setting from DEPTHSERVE_GATEWAY_* in the environment). Normal
clients (httpx, HTTP/2, four of them, each from its own address: 127.0.0.2, .6, .7, .8, as separate users
are) offer an open-loop Poisson load at 50% of capacity together in every
run. Runs come in pairs on one fresh gateway: quiet (normal traffic only), then the same with one attack
from its own address, run by bench/abuse_attacks.py in its own process:

- slow-upload (127.0.0.3): 400 HTTP/1.1 sockets and 400 HTTP/2 streams (100 per connection) that declare
  a 32 MiB body and send nothing (half) or 16 bytes a second (half), re-opened when answered;
- unread-reply (127.0.0.4): 16 HTTP/2 streams (8 per connection) asking for a 16 MiB .npy depth map
  over a 1 KiB flow-control window that is never opened wider;
- overload (127.0.0.5): open-loop Poisson arrivals at 5x capacity, every reply timed.

--attack-size scales those counts and the overload rate (comma-separated: one pair per size per round).
Per run: normal clients' success and p50/p99 (of successes), p99 against the quiet run just before it,
the gateway's peak RSS (VmHWM summed over its process tree: the pair's gateway is fresh, so the attack
row is the peak of both runs), the p99 of every 503 any measured client got (normal and overload), the
gateway's retries (from /v1/cluster) per 503, and the 1-minute load average when the run ended. In
overload runs the 503 p99 is timed by a probe process sending one request at a time (20/s) from the
attacker's address: the generator's own timings at 500 req/s include its event loop's lag (shown in
the attack column); the same probe times, in turn, bench/floor_server.py on the gateway's core (a server
that answers 503 doing nothing else: the machine's own floor, in the "floor 503 p99" column). Attackers
run in the idle scheduling class (SCHED_IDLE; nice 19 where that is refused) so that their own CPU use
is not counted in the measuring clients' or workers' latency; what each achieved is in the attack
column, for overload with the most arrivals it sent in 10 ms against what Poisson arrivals reach.
`--pin` puts the gateway alone on core 0 (beside it only the overload generator, in the idle class,
and the floor server) and everything else on the other cores.

    python bench/abuse.py [--rounds 2] [--duration 8] [--attack-size 1,2] [--markdown out.md] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from depthserve.testing.processes import Proc, descendants, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image

SERVICE_MS = 20.0
WORKERS = 2
CAPACITY = WORKERS * 1000.0 / SERVICE_MS
NORMAL_SOURCES = ("127.0.0.2", "127.0.0.6", "127.0.0.7", "127.0.0.8")  # four normal clients, one address each
ATTACKS = {"slow-upload": "127.0.0.3", "unread-reply": "127.0.0.4", "overload": "127.0.0.5"}
ATTACKER = Path(__file__).with_name("abuse_attacks.py")
PROBE_RATE = 20.0  # requests a second the refusal probe sends, one at a time
COLUMNS = (
    "round",
    "run",
    "normal sent",
    "normal ok %",
    "normal failed",
    "p50 ms",
    "p99 ms",
    "p99 ÷ quiet",
    "gateway peak RSS MB",
    "gateway CPU %",
    "503 p99 ms",
    "floor 503 p99 ms",
    "retries per 503",
    "load avg",
    "attack",
)


@dataclass
class Normal:
    """What the normal clients sent and got: every request is ok, refused (a status) or a transport error."""

    sent: int = 0
    ok_ms: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    refused_ms: list[float] = field(default_factory=list)

    @property
    def success(self) -> float:
        """Share of requests answered 200."""
        return len(self.ok_ms) / self.sent if self.sent else float("nan")

    def p(self, q: float) -> float:
        """Latency percentile of the successful requests, ms."""
        return float(np.percentile(self.ok_ms, q)) if self.ok_ms else float("nan")


@dataclass
class Run:
    """One run's figures, beside the quiet run's p99 on the same gateway."""

    round_number: int
    label: str
    normal: Normal
    quiet_p99: float
    rss_mb: float
    cpu_percent: float
    refused_ms: list[float]
    probe_ms: list[float]  # 503s the probe from the attacker's address got, timed without load-generator lag
    floor_ms: list[float]  # the same probe's requests to the floor server on the gateway's core, in turn
    retries: int | None
    load: float
    attack: str


async def normal_traffic(
    url: str, rate: float, duration: float, timeout_s: float, on_end: Callable[[], None]
) -> Normal:
    """Offer Poisson arrivals at `rate` for `duration`, call `on_end`, then wait (bounded) for every reply."""
    body = png_bytes(seeded_image(64, 64))
    stats = Normal()
    rng = random.Random(0)
    clients = [
        httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(http1=False, http2=True, local_address=source), timeout=timeout_s
        )
        for source in NORMAL_SOURCES
    ]

    async def one(client: httpx.AsyncClient) -> None:
        started = time.perf_counter()
        try:
            reply = await client.post(f"{url}/v1/depth", content=body, headers={"content-type": "image/png"})
        except httpx.HTTPError as exc:
            stats.statuses[type(exc).__name__] += 1
            return
        took_ms = (time.perf_counter() - started) * 1000.0
        if reply.status_code == 200:
            stats.ok_ms.append(took_ms)
            return
        stats.statuses[str(reply.status_code)] += 1
        if reply.status_code == 503:
            stats.refused_ms.append(took_ms)

    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    next_at = 0.0
    try:
        while next_at < duration:
            await asyncio.sleep(max(0.0, start + next_at - time.perf_counter()))  # yields even when behind
            tasks.append(asyncio.create_task(one(clients[stats.sent % len(clients)])))
            stats.sent += 1
            next_at += rng.expovariate(rate)
        on_end()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=timeout_s + 2)
            for task in late:
                task.cancel()
            if late:
                stats.statuses["unfinished"] += len(late)
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))
    return stats


class Attacker:
    """bench/abuse_attacks.py in a child process: ready once at full strength, counts back when stopped."""

    def __init__(
        self,
        kind: str,
        port: int,
        size: float,
        factor: float,
        grace_s: float,
        log: Path,
        source_of: str = "",
        extra: tuple[str, ...] = (),
    ) -> None:
        source = ATTACKS[source_of or kind]
        command = [sys.executable, str(ATTACKER), kind, "--port", str(port), "--source", source]
        command += ["--size", str(size), "--rate", str(factor * CAPACITY), "--grace-s", str(grace_s), *extra]
        self.log = log
        with log.open("wb") as errors:
            self.popen = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        assert self.popen.stdout is not None
        if not select.select([self.popen.stdout], [], [], timeout_s)[0] or self.popen.stdout.readline() != b"ready\n":
            self.popen.kill()
            raise SystemExit(f"attacker not ready after {timeout_s:g} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Tell the attacker to stop; it closes its sockets and reports."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def result(self, timeout_s: float) -> dict[str, Any]:
        """The attacker's JSON line of counts; an attacker that does not report or exit in time is killed."""
        assert self.popen.stdout is not None
        line = b""
        if select.select([self.popen.stdout], [], [], timeout_s)[0]:
            line = self.popen.stdout.readline()
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        if not line:
            return {"error": f"attacker gave no counts (exit {self.popen.returncode}): {self.log.read_text()[-300:]}"}
        return dict(json.loads(line))


class FloorServer:
    """bench/floor_server.py in a child process, on the gateway's core when pinned: the machine's floor."""

    def __init__(self, pin_to: set[int] | None) -> None:
        command = [sys.executable, str(Path(__file__).with_name("floor_server.py"))]
        self.popen = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
        assert self.popen.stdout is not None
        if not select.select([self.popen.stdout], [], [], 30.0)[0]:
            self.popen.kill()
            raise SystemExit("the floor server did not start")
        self.port = int(self.popen.stdout.readline())
        if pin_to is not None:
            pin(self.popen.pid, pin_to)

    def stop(self) -> None:
        """Stop it and wait for it."""
        self.popen.kill()
        self.popen.wait()


def peak_rss_mb(pid: int) -> float:
    """Peak resident memory (VmHWM) summed over a process tree: the gateway and granian's worker."""
    total_kib = 0
    for member in {pid, *descendants(pid)}:
        try:
            with open(f"/proc/{member}/status") as status:
                total_kib += next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        except (OSError, StopIteration):
            continue
    return total_kib / 1024


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) summed over a process tree, so a saturated gateway shows as ~100% of a core."""
    ticks = 0
    for member in {pid, *descendants(pid)}:
        try:
            with open(f"/proc/{member}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def pin(pid: int, cores: set[int]) -> None:
    """Move every thread of a process tree onto `cores` (sched_setaffinity is per thread)."""
    for member in {pid, *descendants(pid)}:
        try:
            threads = os.listdir(f"/proc/{member}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                os.sched_setaffinity(int(thread), cores)
            except OSError:
                continue


def retries(url: str) -> int | None:
    """The gateway's count of attempts re-sent to another backend, or None if it cannot be read."""
    try:
        return int(httpx.get(f"{url}/v1/cluster", timeout=10).json()["retries"])
    except (httpx.HTTPError, KeyError, ValueError):
        return None


def describe(kind: str, result: dict[str, Any]) -> str:
    """One short line on what the attack achieved."""
    if "error" in result:
        return str(result["error"])[:120]
    if kind == "overload":
        achieved = result["sent"] / result["window_s"] if result["window_s"] else 0.0
        own = result.get("refused_ms") or [float("nan")]
        return (
            f"{result['sent']} sent, {achieved:.0f}/s of {result['rate']:.0f}/s (at most {result['max_per_10ms']} in "
            f"10 ms, Poisson {result['poisson_max_per_10ms']}): {result['statuses']}; "
            f"503 p99 as the loaded generator timed it {np.percentile(own, 99):.0f} ms"
        )
    counts = {k: v for k, v in result["counts"].items() if k not in ("opened", "connections")}
    held = result["replies_held"] if kind == "unread-reply" else result["holding"]
    what = "replies unread" if kind == "unread-reply" else "uploads held"
    return f"{held}/{result['target']} {what}, {result['counts'].get('opened', 0)} opened, answers {counts or '-'}"


class Bench:
    """The fixed parts (settings, workers, log folder) and one run or one quiet-then-attack pair at a time."""

    def __init__(self, args: argparse.Namespace, logs: Path, backends: list[str], floor_port: int) -> None:
        self.args = args
        self.logs = logs
        self.backends = backends
        self.floor_port = floor_port

    def pair(self, round_number: int, kind: str, size: float) -> list[Run]:
        """A fresh gateway, a quiet run on it, then the attack run on the same gateway."""
        flags = ["--request-timeout-s", str(self.args.request_timeout_s)]
        flags += ["--upload-timeout-s", str(self.args.upload_timeout_s)]
        gateway, url = start_gateway(self.logs, self.backends, *flags)
        if self.args.pin:
            pin(gateway.pid, {0})
        try:
            quiet = self.run(gateway, url, round_number, None, size, float("nan"))
            return [quiet, self.run(gateway, url, round_number, kind, size, quiet.normal.p(99))]
        finally:
            gateway.stop()

    def run(self, gateway: Proc, url: str, round_number: int, kind: str | None, size: float, quiet_p99: float) -> Run:
        """Normal traffic for --duration beside the attack (if any) at full strength, then every count."""
        args = self.args
        before = retries(url)
        attacker = prober = None
        if kind is not None:
            log = self.logs / f"attack-{kind}-{time.time_ns()}.log"
            port = int(url.rsplit(":", 1)[1])
            attacker = Attacker(kind, port, size, args.overload, args.request_timeout_s + 1, log)
            attacker.wait_ready()
            if kind == "overload" and args.pin:
                # In the idle class on the busy core it got the CPU only when clients and workers slept, then
                # sent its backlog at once (up to 76 arrivals in 10 ms, Poisson at 5x: 14): an attack of bursts
                # far above 5x. On the gateway's core it fills the gateway's idle time and yields to it at once.
                pin(attacker.popen.pid, {0})
            if kind == "overload":  # from the attacker's address, timed by a process with nothing else to do
                grace_s, probe_log = args.request_timeout_s + 1, log.with_suffix(".probe.log")
                floor = ("--floor-port", str(self.floor_port))
                prober = Attacker("probe", port, 1.0, PROBE_RATE / CAPACITY, grace_s, probe_log, kind, floor)
                prober.wait_ready()
        timeout_s = args.request_timeout_s + 5
        cpu_before, started = cpu_seconds(gateway.pid), time.monotonic()
        try:

            def stop() -> None:
                for each in (attacker, prober):
                    if each is not None:
                        each.stop()

            normal = asyncio.run(normal_traffic(url, args.load * CAPACITY, args.duration, timeout_s, stop))
            cpu_percent = 100 * (cpu_seconds(gateway.pid) - cpu_before) / (time.monotonic() - started)
            result = attacker.result(timeout_s + 20) if attacker else {}
            probed = prober.result(timeout_s + 20) if prober else {}
        finally:
            for each in (attacker, prober):
                if each is not None and each.popen.poll() is None:
                    each.popen.kill()
        after = retries(url)
        detail = ("" if gateway.alive() else "GATEWAY DIED; ") + (describe(kind, result) if kind else "-")
        if probed:
            detail += f"; probe got {probed.get('statuses', probed.get('error'))}"
        return Run(
            round_number,
            f"{kind}, size {size:g}" if kind else "quiet",
            normal,
            quiet_p99,
            peak_rss_mb(gateway.pid),
            cpu_percent,
            normal.refused_ms + list(result.get("refused_ms", [])),
            list(probed.get("refused_ms", [])),
            list(probed.get("floor_ms", [])),
            None if before is None or after is None else after - before,
            os.getloadavg()[0],
            detail,
        )


def render(runs: list[Run], title: str, markdown: Path | None) -> None:
    """Print one table; append it to `markdown` too when given."""
    table = Table(title=title)
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in ("run", "attack") else "right")
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for run in runs:
        timed = run.probe_ms or run.refused_ms
        refused_p99 = float(np.percentile(timed, 99)) if timed else None
        per_503 = run.retries / len(run.refused_ms) if run.refused_ms and run.retries is not None else None
        row = [
            str(run.round_number),
            run.label,
            str(run.normal.sent),
            f"{100 * run.normal.success:.1f}",
            str(dict(run.normal.statuses) or "-"),
            f"{run.normal.p(50):.1f}",
            f"{run.normal.p(99):.1f}",
            f"{run.normal.p(99) / run.quiet_p99:.2f}" if run.label != "quiet" else "1.00",
            f"{run.rss_mb:.0f}",
            f"{run.cpu_percent:.0f}",
            f"{refused_p99:.1f}" if refused_p99 is not None else "-",
            f"{np.percentile(run.floor_ms, 99):.1f}" if run.floor_ms else "-",
            f"{per_503:.2f}" if per_503 is not None else f"- ({run.retries} retries)",
            f"{run.load:.1f}",
            run.attack,
        ]
        table.add_row(*row)
        lines.append("| " + " | ".join(row) + " |")
    Console(width=220).print(table)
    if markdown is not None:
        with markdown.open("a") as out:
            out.write("\n".join([f"{title}", "", *lines]) + "\n\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="each round runs every attack after its quiet run")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds of normal traffic per run")
    parser.add_argument("--attack-size", default="1", help="scale of the attacks, comma-separated (e.g. 1,2)")
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="which attacks to run")
    parser.add_argument("--overload", type=float, default=5.0, help="overload rate as a multiple of capacity")
    parser.add_argument("--load", type=float, default=0.5, help="normal traffic as a share of capacity")
    parser.add_argument("--request-timeout-s", type=float, default=5.0, help="the gateway's request deadline")
    parser.add_argument("--upload-timeout-s", type=float, default=5.0, help="the gateway's upload timeout")
    parser.add_argument("--markdown", type=Path, help="append the table to this file as markdown")
    parser.add_argument(
        "--pin", action="store_true", help="gateway alone on core 0; workers, clients and attackers on the others"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="1 round of 2 s runs, attack size 0.25, 2 s deadline: a quick check"
    )
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.duration, args.attack_size, args.request_timeout_s = 1, 2.0, "0.25", 2.0
    sizes = [float(size) for size in args.attack_size.split(",")]
    kinds = args.attacks.split(",")
    if unknown := set(kinds) - set(ATTACKS):
        raise SystemExit(f"unknown attacks: {', '.join(sorted(unknown))}; choose from {', '.join(ATTACKS)}")
    if args.pin:
        os.sched_setaffinity(0, set(range(1, os.cpu_count() or 2)))  # inherited by workers and attackers
    runs: list[Run] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-abuse-") as tmp, Progress(console=Console(stderr=True)) as progress:
        logs = Path(tmp)
        task = progress.add_task("starting workers", total=args.rounds * len(sizes) * len(kinds) * 2)
        worker_flags = ["--synthetic-ms", str(SERVICE_MS), "--warmup-levels", "0"]
        with ThreadPoolExecutor(WORKERS) as pool:  # start together: each waits for its own readiness
            workers = list(pool.map(lambda i: start_worker(logs, *worker_flags, name=f"w{i}"), range(WORKERS)))
        floor = FloorServer(pin_to={0} if args.pin else None)
        try:
            bench = Bench(args, logs, [address for _, address in workers], floor.port)
            for round_number in range(1, args.rounds + 1):
                for size in sizes:
                    for kind in kinds:
                        progress.update(task, description=f"round {round_number}: quiet, then {kind} size {size:g}")
                        runs += bench.pair(round_number, kind, size)
                        progress.advance(task, 2)
        finally:
            floor.stop()
            with ThreadPoolExecutor(WORKERS) as pool:
                list(pool.map(lambda worker: worker[0].stop(), workers))
    title = (
        f"abuse: {WORKERS} synthetic workers at {SERVICE_MS:g} ms = {CAPACITY:g} req/s; normal load "
        f"{args.load:.0%} from {len(NORMAL_SOURCES)} addresses; {args.duration:g} s per run; request deadline "
        f"{args.request_timeout_s:g} s, upload timeout {args.upload_timeout_s:g} s; "
        f"took {time.monotonic() - started:.0f} s"
    )
    render(runs, title, args.markdown)


if __name__ == "__main__":
    main()
