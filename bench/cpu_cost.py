"""CPU per request of our own code: gateway and worker on one core, beside a bare grpc.aio server.

Every server runs pinned to core 0 (`taskset`), h2load on core 1, one HTTP/2 connection. The worker is
synthetic at 0 ms, so no model runs; `bench/bare_grpc.py` answers the same bytes from a cache. Each leg
sends a fixed number of requests after a warm-up and reads each process's own CPU time (utime + stime
of its whole process tree, from /proc) before and after, so the figure is CPU microseconds per request,
not wall time, whatever else the shared machine is doing. Legs, per image size and in-flight count:

- bare npy / bare raw: gRPC ModelInfer to the bare server (npy reply; raw depth + mask tensors)
- worker npy / worker raw: the same message straight to the worker
- /v1/depth (npy), OIP REST (binary tensors, raw reply), OIP gRPC (raw reply): through the gateway

With `--floor`, two more legs send the /v1/depth upload to the bare ASGI and RSGI forwarders of
`bench/floor_apps.py` (granian plus one grpc.aio call to the same worker, nothing else): what the
stack costs before any of the gateway's own work ("floor" column).

Ratios are req/s against the bare server with the same reply. With `--profile DIR`, py-spy records the
gateway and the worker during the gateway legs (separate runs, not counted in the table), sampling the thread
that holds the GIL, so the profile shows where Python time goes (native threads: see each thread's CPU in /proc).

    python bench/cpu_cost.py [--requests 3000] [--sizes 64x64,224x224,640x480] [--streams 1,8] [--rounds 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from h2load_runner import LoadResult, require_h2load, run_h2load  # noqa: E402
from overhead import check_grpc, grpc_frame, oip_rest_body  # noqa: E402
from overhead_floor import start_forwarder  # noqa: E402

from depthserve.probes import free_port, grpc_serving, http_ready  # noqa: E402
from depthserve.protocol.depth_api import DepthInputs, build_request  # noqa: E402
from depthserve.testing.processes import Proc, descendants, wait_until  # noqa: E402
from depthserve.testing.samples import png_bytes, seeded_image  # noqa: E402

SERVER_CORE, CLIENT_CORE = "0", 1
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
GRPC_HEADERS = {"content-type": "application/grpc", "te": "trailers"}
MALLOC = {"MALLOC_MMAP_THRESHOLD_": "67108864", "MALLOC_TRIM_THRESHOLD_": "268435456"}  # as peers.md's runs


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) of a process and its live descendants."""
    total = 0.0
    for one in (pid, *descendants(pid)):
        try:
            with open(f"/proc/{one}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) * TICK_S
    return total


@dataclass(frozen=True)
class Leg:
    """One measured leg: h2load's result and CPU microseconds per request of each server process."""

    name: str
    load: LoadResult
    cpu_us: dict[str, float]
    loadavg: float


@dataclass(frozen=True)
class Target:
    """Where a leg sends its requests and what it sends."""

    name: str
    url: str
    body: bytes
    headers: dict[str, str]


def measure(target: Target, requests: int, streams: int, pids: dict[str, int]) -> Leg:
    """Run one leg and read the CPU each process spent on it."""
    run_h2load(target.name, target.url, target.body, target.headers, 200, streams, core=CLIENT_CORE, warmup=1)
    before = {name: cpu_s(pid) for name, pid in pids.items()}
    load = run_h2load(target.name, target.url, target.body, target.headers, requests, streams, core=CLIENT_CORE)
    spent = {name: (cpu_s(pid) - before[name]) / requests * 1e6 for name, pid in pids.items()}
    return Leg(target.name, load, spent, os.getloadavg()[0])


def targets(width: int, height: int, bare: str, worker: str, gateway: str, gateway_grpc: str) -> list[Target]:
    """Every leg's target for one image size."""
    image = png_bytes(seeded_image(height, width))
    npy = grpc_frame(build_request("lingbot-depth", DepthInputs(image=image, output_format="npy")).SerializeToString())
    raw = grpc_frame(build_request("lingbot-depth", DepthInputs(image=image)).SerializeToString())
    rest_body, rest_length = oip_rest_body(image)
    rest_headers = {
        "content-type": "application/octet-stream",
        "inference-header-content-length": rest_length,
        "accept-encoding": "identity",
    }
    method = "/inference.GRPCInferenceService/ModelInfer"
    return [
        Target("bare npy", f"http://{bare}{method}", npy, GRPC_HEADERS),
        Target("worker npy", f"http://{worker}{method}", npy, GRPC_HEADERS),
        Target("/v1/depth", f"{gateway}/v1/depth", image, {"content-type": "image/png"}),
        Target("bare raw", f"http://{bare}{method}", raw, GRPC_HEADERS),
        Target("worker raw", f"http://{worker}{method}", raw, GRPC_HEADERS),
        Target("OIP REST", f"{gateway}/v2/models/lingbot-depth/infer", rest_body, rest_headers),
        Target("OIP gRPC", f"http://{gateway_grpc}{method}", raw, GRPC_HEADERS),
    ]


def profile(target: Target, requests: int, streams: int, pids: dict[str, int], out: Path) -> None:
    """Record py-spy profiles of the gateway and the worker while `target` is under load."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    out.mkdir(parents=True, exist_ok=True)
    slug = target.name.strip("/").replace("/", "_").replace(" ", "_")
    recorders = []
    for name in ("gateway", "worker"):
        pid = max((pids[name], *descendants(pids[name])))  # granian's worker process is the gateway's youngest
        args = [spy, "record", "--gil", "-r", "250", "-p", str(pid), "-f", "raw", "-o", str(out / f"{slug}-{name}.txt")]
        recorders.append(subprocess.Popen(["taskset", "-c", str(CLIENT_CORE), *args], stdout=subprocess.DEVNULL))
    time.sleep(1.0)
    run_h2load(target.name, target.url, target.body, target.headers, requests, streams, core=CLIENT_CORE)
    for recorder in recorders:
        recorder.send_signal(2)
        recorder.wait(30)


def start(logs: Path, args: list[str], pin: list[str]) -> tuple[Proc, str]:
    """Start `depthserve ARGS` pinned (with only what every tree has, so an older tree can be measured too).

    Gives the process and its address: HOST:PORT of a worker, the URL of a gateway, once it serves.
    """
    port = args[args.index("--port") + 1]
    proc = Proc(args, logs / f"{args[0]}-{port}.log", prefix=pin)
    if args[0] == "worker":
        address = f"127.0.0.1:{port}"
        wait_until(lambda: grpc_serving(address), proc)
        return proc, address
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_ready(url), proc)
    return proc, url


def _accepts(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start_bare(port: int, pin: list[str], log: Path, model: str) -> subprocess.Popen[bytes]:
    """Start bench/bare_grpc.py pinned beside the servers; give it once it serves."""
    script = str(Path(__file__).with_name("bare_grpc.py"))
    extra = [] if model == "synthetic" else [model]
    with log.open("wb") as out:
        proc = subprocess.Popen([*pin, sys.executable, script, str(port), *extra], stdout=out, stderr=out)
    deadline = time.monotonic() + 30
    while not _accepts(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"bare gRPC server did not start:\n{log.read_text()}")
        time.sleep(0.1)
    return proc


def ratio(leg: Leg, base: Leg) -> str:
    return f"{leg.load.rps / base.load.rps:.2f}"


def print_table(rows: list[tuple[str, int, int, list[Leg]]]) -> None:
    """Markdown: one row per leg, with req/s, p50, CPU per request of each process and the ratio to bare."""
    print(
        "| size | in flight | round | leg | req/s | p50 ms | failed | bare CPU us/req | worker CPU us/req |"
        " gateway CPU us/req | floor CPU us/req | req/s / bare | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for size, streams, round_number, legs in rows:
        by_name = {leg.name: leg for leg in legs}
        for leg in legs:
            npy = leg.name in ("bare npy", "worker npy", "/v1/depth") or leg.name.endswith("floor")
            base = by_name["bare npy"] if npy else by_name["bare raw"]
            cpu = [f"{leg.cpu_us[name]:,.0f}" for name in ("bare", "worker", "gateway")]
            floors = [us for name, us in leg.cpu_us.items() if name.endswith("floor")]
            cpu.append(f"{sum(floors):,.0f}" if floors else "-")  # the one forwarder the leg used; the other idles
            print(
                f"| {size} | {streams} | {round_number} | {leg.name} | {leg.load.rps:,.0f} | {leg.load.p50_ms:.2f} |"
                f" {leg.load.failed} | {' | '.join(cpu)} | {ratio(leg, base)} | {leg.loadavg:.1f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--sizes", default="64x64,224x224,640x480", help="WIDTHxHEIGHT, comma-separated")
    parser.add_argument("--streams", default="1,8", help="in-flight requests per leg, comma-separated")
    parser.add_argument("--rounds", type=int, default=1, help="repeat every leg this many times, interleaved")
    parser.add_argument("--legs", default="", help="only these legs (comma-separated names), default all")
    parser.add_argument("--profile", type=Path, help="also record py-spy profiles of the gateway legs here")
    parser.add_argument("--gateway-args", default="", help="extra gateway flags, space-separated")
    parser.add_argument("--floor", action="store_true", help="add legs through the bare ASGI/RSGI forwarders")
    parser.add_argument(
        "--model", default="synthetic", choices=["synthetic", "tiny"], help="tiny: a real model, npy legs"
    )
    args = parser.parse_args()
    require_h2load()
    os.environ.update(MALLOC)  # children inherit identical allocator settings
    pin = ["taskset", "-c", SERVER_CORE]
    rows: list[tuple[str, int, int, list[Leg]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        bare_port = free_port()
        bare = start_bare(bare_port, pin, logs / "bare.log", args.model)
        model = ["--model", "synthetic", "--synthetic-ms", "0"] if args.model == "synthetic" else ["--model", "tiny"]
        threads = [] if args.model == "synthetic" else ["--threads", "1"]  # one core, as the bare server
        worker, address = start(logs, ["worker", "--port", str(free_port()), *model, *threads], pin)
        grpc_port = free_port()
        extra = ["--grpc-port", str(grpc_port), *args.gateway_args.split()]
        gateway_port = free_port()
        gateway, url = start(logs, ["gateway", "--port", str(gateway_port), "--backends", address, *extra], pin)
        floors = {
            f"{interface.upper()} floor": start_forwarder(interface, address, logs / f"{interface}.log", pin)
            for interface in (("asgi", "rsgi") if args.floor else ())
        }
        try:
            bare_address = f"127.0.0.1:{bare_port}"
            pids = {"bare": bare.pid, "worker": worker.pid, "gateway": gateway.pid}
            pids.update({name: proc.pid for name, (proc, _) in floors.items()})
            probe = build_request(
                "lingbot-depth", DepthInputs(image=png_bytes(seeded_image(64, 64)))
            ).SerializeToString()
            for grpc_address in (bare_address, address, f"127.0.0.1:{grpc_port}"):
                check_grpc(grpc_address, probe)
            for size in args.sizes.split(","):
                width, height = (int(side) for side in size.split("x"))
                legs = targets(width, height, bare_address, address, url, f"127.0.0.1:{grpc_port}")
                image = png_bytes(seeded_image(height, width))
                legs += [
                    Target(name, floor_url, image, {"content-type": "image/png"})
                    for name, (_, floor_url) in floors.items()
                ]
                if args.model != "synthetic":  # a model's reply is its npy file: the npy legs
                    legs = [leg for leg in legs if leg.name in ("bare npy", "worker npy", "/v1/depth")]
                if args.legs:
                    wanted = set(args.legs.split(","))
                    legs = [
                        leg
                        for leg in legs
                        if leg.name in wanted or leg.name.startswith("bare") or leg.name.endswith("floor")
                    ]
                for streams in (int(s) for s in args.streams.split(",")):
                    for round_number in range(1, args.rounds + 1):
                        measured = [measure(leg, args.requests, streams, pids) for leg in legs]
                        rows.append((size, streams, round_number, measured))
                    if args.profile is not None:
                        args.profile.mkdir(parents=True, exist_ok=True)
                        for leg in legs:
                            if not leg.name.startswith("bare"):
                                profile(leg, args.requests, streams, pids, args.profile / f"{size}-{streams}")
        finally:
            for proc, _ in floors.values():
                proc.terminate()
                proc.wait(10)
            gateway.stop()
            worker.stop()
            bare.terminate()
            bare.wait(10)
    print_table(rows)


if __name__ == "__main__":
    main()
