"""Container health: the gateway's /healthz, or a worker's gRPC health (SERVING once warm), whichever PID 1 runs.

Reads the command of the container's main process (`depthserve gateway ...` or `depthserve worker
...`) for the port (a flag, else DEPTHSERVE_*_PORT, else the default); exits 0 when healthy, 1 when
not, as Docker's HEALTHCHECK expects.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_PORTS = {"gateway": 8000, "worker": 50051}


def command_of(cmdline: bytes) -> tuple[str, dict[str, str]]:
    """The depthserve subcommand and its `--flag value` pairs from a NUL-separated command line."""
    args = [a.decode() for a in cmdline.split(b"\0") if a]
    role = next((a for a in args if a in DEFAULT_PORTS), "")
    flags = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    return role, flags


def port_of(role: str, flags: dict[str, str]) -> int:
    """The port the component listens on: its flag, its environment variable, or its default."""
    return int(flags.get("--port") or os.environ.get(f"DEPTHSERVE_{role.upper()}_PORT") or DEFAULT_PORTS[role])


def healthy(role: str, port: int, flags: dict[str, str]) -> bool:
    """Ask the component itself."""
    if role == "gateway":
        import httpx

        scheme = "https" if "--tls-cert" in flags else "http"
        try:
            return httpx.get(f"{scheme}://127.0.0.1:{port}/healthz", timeout=2.0, verify=False).status_code == 200
        except httpx.HTTPError:
            return False
    from depthserve.probes import grpc_serving

    return grpc_serving(f"127.0.0.1:{port}", timeout=2.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cmdline", type=Path, default=Path("/proc/1/cmdline"), help="whose command to read")
    args = parser.parse_args()
    role, flags = command_of(args.cmdline.read_bytes())
    if not role:
        print("healthcheck: the main process is neither a gateway nor a worker", file=sys.stderr)
        return 0  # a one-off command (weights download, --help): nothing to check
    ok = healthy(role, port_of(role, flags), flags)
    if not ok:
        print(f"healthcheck: {role} on port {port_of(role, flags)} is not healthy", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
