"""How close the gateway is to the floor of its stack: a bare granian + grpc.aio forwarder, side by side.

One synthetic worker at 0 ms; h2load sends the same 64x64 PNG (one request in flight) straight to
the worker over gRPC, through the minimal ASGI and RSGI forwarders of `bench/floor_apps.py`, and
through the real gateway's `/v1/depth`, in one run. The forwarders do nothing but forward, so what
they add is the price of granian plus a Python gRPC call; the gateway's extra is its own work.

    python bench/overhead_floor.py [--requests 3000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from h2load_runner import require_h2load, run_h2load  # noqa: E402
from overhead import grpc_frame  # noqa: E402

from depthserve.probes import free_port, http_status  # noqa: E402
from depthserve.protocol.depth_api import DepthInputs, build_request  # noqa: E402
from depthserve.testing.processes import start_gateway, start_worker  # noqa: E402
from depthserve.testing.samples import png_bytes, seeded_image  # noqa: E402


def start_forwarder(
    interface: str, worker: str, log: Path, prefix: Sequence[str] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    """Run one floor app under granian on a free port (after `prefix`, e.g. taskset); its URL once it answers."""
    port = free_port()
    env = {**os.environ, "WORKER": worker, "PYTHONPATH": str(Path(__file__).parent)}
    granian = Path(sys.executable).with_name("granian")
    command = [str(granian), "--interface", interface, "--http", "auto", "--loop", "uvloop"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*prefix, *command, "--port", str(port), f"floor_apps:{interface}"], env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while http_status(url, "") is None:  # any answer (an empty GET fails inside) means it is up
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"{interface} forwarder did not start; see {log}")
        time.sleep(0.2)
    return proc, url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2, help="repeat the four legs this many times")
    args = parser.parse_args()
    require_h2load()
    image = png_bytes(seeded_image(64, 64))
    grpc_body = grpc_frame(
        build_request("lingbot-depth", DepthInputs(image=image, output_format="npy")).SerializeToString()
    )
    table = Table(title="added p50 over direct gRPC, one request in flight, 64x64 PNG, npy reply")
    for column in ("round", "direct p50 ms", "ASGI forwarder", "RSGI forwarder", "gateway /v1/depth"):
        table.add_column(column, justify="right")
    png = {"content-type": "image/png"}
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        worker, address = start_worker(logs, "--model", "synthetic", "--synthetic-ms", "0")
        gateway, gateway_url = start_gateway(logs, [address])
        forwarders = [start_forwarder(kind, address, logs / f"{kind}.log") for kind in ("asgi", "rsgi")]
        try:
            for round_number in range(1, args.rounds + 1):
                grpc_url = f"http://{address}/inference.GRPCInferenceService/ModelInfer"
                grpc_headers = {"content-type": "application/grpc", "te": "trailers"}
                direct = run_h2load("direct", grpc_url, grpc_body, grpc_headers, args.requests, 1)
                legs = [
                    run_h2load(kind, url, image, png, args.requests, 1)
                    for kind, (_, url) in zip(("asgi", "rsgi"), forwarders, strict=True)
                ]
                legs.append(run_h2load("gateway", f"{gateway_url}/v1/depth", image, png, args.requests, 1))
                table.add_row(
                    str(round_number), f"{direct.p50_ms:.2f}", *(f"+{leg.p50_ms - direct.p50_ms:.2f}" for leg in legs)
                )
        finally:
            for proc, _ in forwarders:
                proc.terminate()
                proc.wait(10)
            gateway.stop()
            worker.stop()
    Console().print(table)


if __name__ == "__main__":
    main()
