"""Overload: offer 1x, 2x and 5x the cluster's capacity and check that it degrades gracefully.

Two synthetic workers (50 ms per request, so 40 req/s together) sit behind a gateway with an
admission limit of 4 in flight per worker, a short admission queue and a 2 s request deadline.
h2load offers an open-loop load (10 HTTP/2 clients at a fixed rate each) for --duration seconds per
level. Reported: goodput against capacity, p50/p99 of accepted requests, p99 of refusals, the
refusal reasons, and the gateway's resident memory across the run (it must stay flat).

    python bench/overload.py [--duration 30] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from rich.console import Console
from rich.table import Table

from depthserve.testing.processes import descendants, start_gateway, start_worker
from depthserve.testing.samples import png_bytes, seeded_image

SERVICE_MS = 50.0
WORKERS = 2
CAPACITY = WORKERS * 1000.0 / SERVICE_MS
CLIENTS = 10


@dataclass
class Level:
    """One offered load and what came back."""

    factor: float
    sent: int
    ok: int
    refused: dict[int, int]
    ok_p50: float
    ok_p99: float
    refused_p99: float
    duration: float


def rss_kib(pid: int) -> int:
    """Resident memory of a process tree (the gateway and granian's worker), KiB."""
    total = 0
    for member in {pid, *descendants(pid)}:
        try:
            with open(f"/proc/{member}/status") as status:
                total += next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
    return total


def offer(url: str, body: Path, factor: float, duration: float) -> Level:
    """Run h2load at factor x capacity and read its per-request log."""
    rate = max(1, round(factor * CAPACITY / CLIENTS))
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.tsv"
        subprocess.run(
            [
                "h2load",
                "-c",
                str(CLIENTS),
                "-m",
                "100",
                "--rps",
                str(rate),
                "-D",
                str(round(duration)),
                "-d",
                str(body),
                "-H",
                "content-type: image/png",
                f"--log-file={log}",
                f"{url}/v1/depth",
            ],
            check=True,
            capture_output=True,
            timeout=duration + 120,
        )
        rows = np.array([[int(x) for x in line.split("\t")] for line in log.read_text().splitlines() if line])
    status, took_ms = rows[:, 1], rows[:, 2] / 1000.0
    ok = status == 200
    refused = {int(code): int((status == code).sum()) for code in np.unique(status[~ok])}
    return Level(
        factor,
        len(rows),
        int(ok.sum()),
        refused,
        float(np.percentile(took_ms[ok], 50)),
        float(np.percentile(took_ms[ok], 99)),
        float(np.percentile(took_ms[~ok], 99)) if (~ok).any() else float("nan"),
        duration,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=30.0)
    parser.add_argument("--factors", default="1,2,5")
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if shutil.which("h2load") is None:
        raise SystemExit("h2load not found: apt-get install nghttp2-client")
    levels: list[Level] = []
    memory: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        body = logs / "image.png"
        body.write_bytes(png_bytes(seeded_image(64, 64)))
        workers = [
            start_worker(logs, "--synthetic-ms", str(SERVICE_MS), "--warmup-levels", "0", name=f"w{i}")
            for i in range(WORKERS)
        ]
        config = logs / "gateway.yaml"
        config.write_text("max_in_flight: 8\nmax_queue: 8\nrequest_timeout_s: 2.0\nprobe_inference_every: 0\n")
        gateway, url = start_gateway(logs, [a for _, a in workers], "--config", str(config))
        try:
            memory.append(rss_kib(gateway.pid))
            for factor in (float(f) for f in args.factors.split(",")):
                levels.append(offer(url, body, factor, args.duration))
                memory.append(rss_kib(gateway.pid))
            view = httpx.get(f"{url}/v1/cluster").json()
            alive = gateway.alive() and all(proc.alive() for proc, _ in workers)
        finally:
            gateway.stop()
            for proc, _ in workers:
                proc.stop()
    table = Table(title=f"overload: {WORKERS} synthetic workers at {SERVICE_MS:g} ms = {CAPACITY:g} req/s capacity")
    columns = ("offered", "sent", "goodput req/s", "of capacity", "ok p50 ms", "ok p99 ms", "refused", "refused p99 ms")
    for column in columns:
        table.add_column(column, justify="right")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for level in levels:
        goodput = level.ok / level.duration
        row = [
            f"{level.factor:g}x",
            str(level.sent),
            f"{goodput:.1f}",
            f"{goodput / CAPACITY:.0%}",
            f"{level.ok_p50:.0f}",
            f"{level.ok_p99:.0f}",
            str(level.refused or "-"),
            f"{level.refused_p99:.1f}",
        ]
        table.add_row(*row)
        lines.append("| " + " | ".join(row) + " |")
    console = Console(width=200)
    console.print(table)
    notes = [
        f"gateway RSS (KiB) before and after each level: {memory}",
        f"admission: {view['admission']}",
        f"every process alive at the end: {alive}",
    ]
    for note in notes:
        console.print(note)
    if args.markdown:
        args.markdown.write_text("\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n")


if __name__ == "__main__":
    main()
