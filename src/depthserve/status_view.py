"""`depthserve status`: the gateway's /v1/cluster as a terminal table."""

from __future__ import annotations

from typing import Any

import httpx
from rich.console import Console
from rich.table import Table


def cluster_table(cluster: dict[str, Any]) -> Table:
    """Lay out one row per backend with its state, load and latency."""
    table = Table(title=f"model {cluster.get('model')} · policy {cluster.get('policy')}")
    for column in ("backend", "state", "in flight", "served", "errors", "ewma ms", "queue", "util"):
        table.add_column(column, justify="left" if column in ("backend", "state") else "right")
    for backend in cluster.get("backends", []):
        load = backend.get("load") or {}
        colour = {"ready": "green", "unready": "red"}.get(backend["state"], "yellow")
        table.add_row(
            backend["address"],
            f"[{colour}]{backend['state']}[/{colour}]",
            str(backend["in_flight"]),
            str(backend["served"]),
            str(backend["errors"]),
            f"{backend['ewma_ms']:.1f}",
            str(load.get("queue", "-")),
            f"{load['gpu_util']:.0%}" if "gpu_util" in load else "-",
        )
    return table


def show_status(url: str) -> int:
    """Fetch /v1/cluster and print it; return an exit code."""
    console = Console()
    try:
        reply = httpx.get(f"{url.rstrip('/')}/v1/cluster", timeout=5.0)
        reply.raise_for_status()
    except httpx.HTTPError as exc:
        console.print(f"[red]cannot read {url}/v1/cluster: {exc}[/red]")
        return 1
    console.print(cluster_table(reply.json()))
    return 0
