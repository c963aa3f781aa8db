"""The backends of /v1/cluster as a table: every column when the terminal is wide, a compact one otherwise."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

LEFT = ("backend", "model:version", "state")
FULL = (
    "backend",
    "model:version",
    "state",
    "weight",
    "in flight",
    "served",
    "errors",
    "ewma ms",
    "peak ms",
    "queue+run",
    "batch",
    "util",
    "memory",
    "temp",
    "cap rps",
    "report age",
)
# The compact table's columns, by the full table's names, with shorter headings; it fits 80 columns.
COMPACT = {
    "backend": "backend",
    "state": "state",
    "weight": "weight",
    "in flight": "flight",
    "served": "served",
    "errors": "err",
    "ewma ms": "ms",
    "queue+run": "q+run",
    "util": "util",
}


def _load_cells(backend: dict[str, Any]) -> list[str]:
    load = backend.get("load")
    if not load or backend.get("load_stale"):
        return ["?"] * 7  # no report, or too old to trust: unknown, not idle
    mem = f"{load['mem_used'] / 2**30:.1f}/{load['mem_total'] / 2**30:.0f}G" if load.get("mem_total") else "-"
    return [
        f"{load['queue']}+{load['running']}",
        f"{load.get('batch_size', 0)}/{load['max_batch']}",  # last batch / capacity (older views lack the first)
        f"{load['gpu_util']:.0%}",
        mem,
        "-" if load.get("temp_c") is None else f"{load['temp_c']:.0f}C",  # None: no sensor (most CPUs)
        f"{load['capacity_rps']:.1f}" if load["capacity_rps"] else "-",
        f"{backend['load_age_s']:.1f}s",
    ]


def _model_version(backend: dict[str, Any]) -> str:
    """What the backend serves, as `model:version`; `any` for an untagged --backends entry."""
    model, version = backend.get("model"), backend.get("version")
    if not model:
        return "any"
    return f"{model}:{version}" if version else str(model)


def _row(backend: dict[str, Any]) -> dict[str, str]:
    """One backend's cells by full column name."""
    colour = {"ready": "green", "unhealthy": "red", "ejected": "red"}.get(backend["state"], "yellow")
    weight = f"{backend['weight']:g}" + (" auto" if backend.get("weight_mode") == "auto" else "")
    cells = [
        backend["address"],
        _model_version(backend),
        f"[{colour}]{backend['state']}[/{colour}]",
        weight,
        str(backend["in_flight"]),
        str(backend["served"]),
        str(backend["errors"]),
        f"{backend['ewma_ms']:.1f}",
        f"{backend['peak_ewma_ms']:.1f}",
        *_load_cells(backend),
    ]
    return dict(zip(FULL, cells, strict=True))


def _title(cluster: dict[str, Any]) -> str:
    policies = ", ".join(f"{m}: {p}" for m, p in cluster.get("policies", {}).items())
    return f"model {cluster.get('model')} · policy {cluster.get('policy')}" + (f" ({policies})" if policies else "")


def full_table(cluster: dict[str, Any]) -> Table:
    """Lay out one row per backend: state, weight, the gateway's stats and the backend's last load report."""
    table = Table(title=_title(cluster))
    for column in FULL:
        table.add_column(column, justify="left" if column in LEFT else "right")
    for backend in cluster.get("backends", []):
        table.add_row(*_row(backend).values())
    return table


def compact_table(cluster: dict[str, Any]) -> Table:
    """Lay out the columns that matter most in 80 columns; a backend's model:version goes under its address."""
    table = Table(
        title=_title(cluster),
        caption="a wider terminal shows every column",
        box=box.SIMPLE_HEAD,
        padding=0,  # the box's one space between columns is enough
    )
    for column, heading in COMPACT.items():
        # A cell too long for its column goes on over lines, never cut.
        table.add_column(heading, justify="left" if column in LEFT else "right", overflow="fold")
    for backend in cluster.get("backends", []):
        cells = _row(backend)
        model_version = cells["model:version"]
        if model_version != "any":
            cells["backend"] += f"\n[dim]{model_version}[/dim]"
        table.add_row(*(cells[column] for column in COMPACT))
    return table


def cluster_table(cluster: dict[str, Any], console: Console) -> Table:
    """The full table when it fits the console's width, else the compact one (cells fold, never cut)."""
    table = full_table(cluster)
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    return table if natural <= console.width else compact_table(cluster)
