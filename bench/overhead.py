"""Gateway overhead: the same request through the gateway (HTTP/2) and straight to the worker (gRPC).

Every leg uses h2load with the same payload, concurrency and process placement, in the same run, against
one synthetic worker with 0 ms service time, so the difference is what the gateway adds. Two groups:
`/v1/depth` against direct gRPC with an npy reply, and the Open Inference Protocol (REST with binary
tensors, and gRPC) through the gateway against direct gRPC with raw tensors in the reply.

    python bench/overhead.py [--requests 3000] [--streams 1,8] [--gateway-tree ../old-checkout]

`--gateway-tree` runs an older commit's gateway in front of this tree's worker, so two commits' gateways
are compared against the same worker (each tree's own worker would move the baseline too).
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).parent))
from h2load_runner import LoadResult, require_h2load, run_h2load  # noqa: E402

from depthserve.probes import free_port  # noqa: E402
from depthserve.protocol.depth_api import DepthInputs, build_request  # noqa: E402
from depthserve.protocol.tensors import serialize_bytes  # noqa: E402
from depthserve.testing.processes import start_gateway, start_worker  # noqa: E402
from depthserve.testing.samples import png_bytes, seeded_image  # noqa: E402


def grpc_frame(message: bytes) -> bytes:
    """Wrap a serialized protobuf in gRPC's 5-byte length-prefixed frame."""
    return b"\x00" + struct.pack(">I", len(message)) + message


def oip_rest_body(image: bytes) -> tuple[bytes, str]:
    """An OIP REST infer body as tritonclient sends it: JSON header, then the BYTES tensor in binary."""
    tensor = serialize_bytes([image])
    header = {
        "inputs": [
            {"name": "image", "datatype": "BYTES", "shape": [1], "parameters": {"binary_data_size": len(tensor)}}
        ],
        "parameters": {"binary_data_output": True},
    }
    text = json.dumps(header).encode()
    return text + tensor, str(len(text))


def check_grpc(address: str, message: bytes) -> None:
    """Make one real gRPC call first: h2load counts HTTP 200 as success even when grpc-status says otherwise."""
    import grpc
    from tritonclient.grpc import service_pb2 as pb
    from tritonclient.grpc import service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as channel:
        reply = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            pb.ModelInferRequest.FromString(message), timeout=30
        )
    if not reply.outputs:
        raise SystemExit(f"gRPC call to {address} gave no outputs")


def add_rows(table: Table, streams: int, base: LoadResult, base_label: str, legs: list[tuple[str, LoadResult]]) -> None:
    """One block of rows: the direct baseline, then each gateway leg with its added p50 and req/s ratio."""
    table.add_row(
        str(streams),
        base_label,
        f"{base.rps:,.0f}",
        f"{base.p50_ms:.2f}",
        f"{base.p99_ms:.2f}",
        str(base.failed),
        "",
        "",
    )
    for label, leg in legs:
        table.add_row(
            "",
            label,
            f"{leg.rps:,.0f}",
            f"{leg.p50_ms:.2f}",
            f"{leg.p99_ms:.2f}",
            str(leg.failed),
            f"{leg.p50_ms - base.p50_ms:+.2f}",
            f"{leg.rps / base.rps:.2f}",
        )


def new_table(title: str) -> Table:
    table = Table(title=title)
    for column in ("in flight", "path", "req/s", "p50 ms", "p99 ms", "failed", "added p50 ms", "req/s ratio"):
        table.add_column(column, justify="right")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--streams", default="1,8", help="in-flight requests per run, comma-separated")
    parser.add_argument("--size", type=int, default=224, help="square image side, pixels")
    parser.add_argument("--groups", default="depth,oip", help="which groups to run: depth (/v1/depth), oip")
    parser.add_argument(
        "--gateway-tree",
        type=Path,
        help="run the gateway from this checkout's src/ (an older commit), against this tree's worker",
    )
    args = parser.parse_args()
    groups = set(args.groups.split(","))
    require_h2load()
    image = png_bytes(seeded_image(args.size, args.size))
    npy_message = build_request("lingbot-depth", DepthInputs(image=image, output_format="npy")).SerializeToString()
    raw_message = build_request("lingbot-depth", DepthInputs(image=image)).SerializeToString()
    rest_body, rest_header_length = oip_rest_body(image)
    grpc_headers = {"content-type": "application/grpc", "te": "trailers"}
    plain = {"accept-encoding": "identity"}  # compare pass-through, not the gateway's gzip
    depth_rows: list[tuple[int, LoadResult, LoadResult]] = []
    oip_rows: list[tuple[int, LoadResult, LoadResult, LoadResult]] = []
    with tempfile.TemporaryDirectory() as logs:
        worker, address = start_worker(Path(logs), "--model", "synthetic", "--synthetic-ms", "0")
        grpc_port = free_port()
        tree = {"PYTHONPATH": str(args.gateway_tree.resolve() / "src")} if args.gateway_tree else None
        gateway, url = start_gateway(Path(logs), [address], "--grpc-port", str(grpc_port), env=tree)
        gateway_grpc = f"127.0.0.1:{grpc_port}"
        worker_url = f"http://{address}/inference.GRPCInferenceService/ModelInfer"
        gateway_grpc_url = f"http://{gateway_grpc}/inference.GRPCInferenceService/ModelInfer"
        try:
            check_grpc(address, raw_message)
            check_grpc(gateway_grpc, raw_message)
            for streams in (int(s) for s in args.streams.split(",")):
                if "depth" in groups:
                    direct = run_h2load(
                        f"direct gRPC, {streams} in flight",
                        worker_url,
                        grpc_frame(npy_message),
                        grpc_headers,
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
                    depth_rows.append((streams, direct, through))
                if "oip" in groups:
                    direct_raw = run_h2load(
                        f"direct gRPC raw, {streams} in flight",
                        worker_url,
                        grpc_frame(raw_message),
                        grpc_headers,
                        args.requests,
                        streams,
                    )
                    oip_grpc = run_h2load(
                        f"gateway OIP gRPC, {streams} in flight",
                        gateway_grpc_url,
                        grpc_frame(raw_message),
                        grpc_headers,
                        args.requests,
                        streams,
                    )
                    oip_rest = run_h2load(
                        f"gateway OIP REST, {streams} in flight",
                        f"{url}/v2/models/lingbot-depth/infer",
                        rest_body,
                        {
                            "content-type": "application/octet-stream",
                            "inference-header-content-length": rest_header_length,
                            **plain,
                        },
                        args.requests,
                        streams,
                    )
                    oip_rows.append((streams, direct_raw, oip_grpc, oip_rest))
        finally:
            gateway.stop()
            worker.stop()
    console = Console(width=140)
    if depth_rows:
        table = new_table(
            f"gateway overhead, /v1/depth ({args.size}x{args.size} PNG, npy reply, synthetic worker at 0 ms, "
            f"{args.requests} requests per cell)"
        )
        for streams, direct, through in depth_rows:
            add_rows(table, streams, direct, "direct gRPC", [("via gateway", through)])
        console.print(table)
    if oip_rows:
        table = new_table(
            f"gateway overhead, OIP ({args.size}x{args.size} PNG as BYTES, raw depth+mask reply, synthetic worker "
            f"at 0 ms, {args.requests} requests per cell)"
        )
        for streams, direct_raw, oip_grpc, oip_rest in oip_rows:
            add_rows(
                table,
                streams,
                direct_raw,
                "direct gRPC",
                [("OIP gRPC via gateway", oip_grpc), ("OIP REST via gateway", oip_rest)],
            )
        console.print(table)


if __name__ == "__main__":
    main()
