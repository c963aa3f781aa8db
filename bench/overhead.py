"""Gateway overhead: the same request through the gateway (HTTP/2) and straight to the worker (gRPC).

Both legs use h2load with the same payload, concurrency and process placement, in the same run, against
one synthetic worker with 0 ms service time, so the difference is what the gateway adds.

    python bench/overhead.py [--requests 3000] [--streams 1,8]
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from h2load_runner import LoadResult, require_h2load, run_h2load  # noqa: E402

from depthserve.protocol.depth_api import DepthInputs, build_request  # noqa: E402
from depthserve.testing.processes import start_gateway, start_worker  # noqa: E402
from depthserve.testing.samples import png_bytes, seeded_image  # noqa: E402


def grpc_frame(message: bytes) -> bytes:
    """Wrap a serialized protobuf in gRPC's 5-byte length-prefixed frame."""
    return b"\x00" + struct.pack(">I", len(message)) + message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--streams", default="1,8", help="in-flight requests per run, comma-separated")
    parser.add_argument("--size", type=int, default=224, help="square image side, pixels")
    args = parser.parse_args()
    require_h2load()
    image = png_bytes(seeded_image(args.size, args.size))
    grpc_body = grpc_frame(
        build_request("lingbot-depth", DepthInputs(image=image, output_format="npy")).SerializeToString()
    )
    results: list[tuple[int, LoadResult, LoadResult]] = []
    with tempfile.TemporaryDirectory() as logs:
        worker, address = start_worker(Path(logs), "--model", "synthetic", "--synthetic-ms", "0")
        gateway, url = start_gateway(Path(logs), [address])
        try:
            for streams in (int(s) for s in args.streams.split(",")):
                direct = run_h2load(
                    f"direct gRPC, {streams} in flight",
                    f"http://{address}/inference.GRPCInferenceService/ModelInfer",
                    grpc_body,
                    {"content-type": "application/grpc", "te": "trailers"},
                    args.requests,
                    streams,
                )
                through = run_h2load(
                    f"gateway HTTP/2, {streams} in flight",
                    f"{url}/v1/depth",
                    image,
                    {"content-type": "image/png"},
                    args.requests,
                    streams,
                )
                results.append((streams, direct, through))
        finally:
            gateway.stop()
            worker.stop()
    table = Table(
        title=f"gateway overhead ({args.size}x{args.size} PNG, synthetic worker at 0 ms, {args.requests} "
        "requests per cell)"
    )
    for column in ("in flight", "path", "req/s", "p50 ms", "p99 ms", "failed", "added p50 ms", "req/s ratio"):
        table.add_column(column, justify="right")
    for streams, direct, through in results:
        table.add_row(
            str(streams),
            "direct gRPC",
            f"{direct.rps:,.0f}",
            f"{direct.p50_ms:.2f}",
            f"{direct.p99_ms:.2f}",
            str(direct.failed),
            "",
            "",
        )
        table.add_row(
            "",
            "via gateway",
            f"{through.rps:,.0f}",
            f"{through.p50_ms:.2f}",
            f"{through.p99_ms:.2f}",
            str(through.failed),
            f"{through.p50_ms - direct.p50_ms:+.2f}",
            f"{through.rps / direct.rps:.2f}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
