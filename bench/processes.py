"""Gateway throughput with one process against several: `depthserve gateway --processes N` on one port.

One synthetic worker at 0 ms; h2load opens `--connections` HTTP/2 connections (a connection is served
by one process) with `--streams` requests in flight on each, posting the same PNG to /v1/depth. Runs
alternate between the process counts, round by round, each on a fresh gateway; every row gives req/s,
the CPU per request of the gateway (all its processes) and of the worker, and the load average. The
gateway's processes may use every core (`--gateway-cores`); the worker and h2load run where the
operating system puts them unless `--others-cores` says.

    python bench/processes.py [--processes 1,2] [--rounds 2] [--requests 6000] [--size 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cpu_cost import cpu_s, start  # noqa: E402
from h2load_runner import require_h2load, run_h2load  # noqa: E402

from depthserve.probes import free_port  # noqa: E402
from depthserve.testing.samples import png_bytes, seeded_image  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,2", help="gateway process counts to compare, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--size", type=int, default=64, help="square image side, pixels")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--streams", type=int, default=4, help="requests in flight per connection")
    parser.add_argument("--gateway-cores", default="", help="taskset core list for the gateway (default: any)")
    parser.add_argument("--others-cores", default="", help="taskset core list for worker and h2load")
    args = parser.parse_args()
    require_h2load()
    image = png_bytes(seeded_image(args.size, args.size))
    pin_gateway = ["taskset", "-c", args.gateway_cores] if args.gateway_cores else []
    pin_others = ["taskset", "-c", args.others_cores] if args.others_cores else []
    print(
        "| round | processes | req/s | p50 ms | p99 ms | failed | gateway CPU us/req | worker CPU us/req | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        command = ["worker", "--port", str(free_port()), "--model", "synthetic", "--synthetic-ms", "0"]
        worker, address = start(logs, command, pin_others)
        try:
            for round_number in range(1, args.rounds + 1):
                for processes in (int(p) for p in args.processes.split(",")):
                    port = str(free_port())
                    command = ["gateway", "--port", port, "--backends", address, "--processes", str(processes)]
                    gateway, url = start(logs, command, pin_gateway)
                    try:
                        before = cpu_s(gateway.pid), cpu_s(worker.popen.pid)
                        load = run_h2load(
                            f"{processes} processes",
                            f"{url}/v1/depth",
                            image,
                            {"content-type": "image/png"},
                            args.requests,
                            args.streams,
                            connections=args.connections,
                            prefix=pin_others,
                        )
                        spent = [
                            (cpu_s(p) - b) / args.requests * 1e6
                            for p, b in zip((gateway.pid, worker.popen.pid), before, strict=True)
                        ]
                    finally:
                        gateway.stop()
                    print(
                        f"| {round_number} | {processes} | {load.rps:,.0f} | {load.p50_ms:.2f} | {load.p99_ms:.2f} |"
                        f" {load.failed} | {spent[0]:,.0f} | {spent[1]:,.0f} | {os.getloadavg()[0]:.1f} |"
                    )
        finally:
            worker.stop()


if __name__ == "__main__":
    main()
