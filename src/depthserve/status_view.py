"""`depthserve status`: the gateway's /v1/cluster as a terminal table."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import httpx
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from depthserve.status_table import cluster_table

SPARKS = "▁▂▃▄▅▆▇█"


def _console() -> Console:
    """The terminal's width; pipes and logs get the whole table unless COLUMNS says how wide to be."""
    return Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 220)


def sparkline(values: list[float | None], width: int = 60) -> str:
    """Draw the last `width` values as block characters scaled to their maximum (gaps as spaces)."""
    recent = values[-width:]
    top = max((v for v in recent if v is not None), default=0.0)
    if top <= 0:
        return " " * len(recent) if any(v is None for v in recent) else SPARKS[0] * len(recent)
    return "".join(" " if v is None else SPARKS[min(len(SPARKS) - 1, int(v / top * len(SPARKS)))] for v in recent)


def history_text(history: dict[str, Any]) -> Text:
    """Two lines: QPS and p99 now, with their recent history as sparklines."""
    points = history.get("points", [])
    last = points[-1] if points else {}
    qps = [p["qps"] for p in points]
    p99 = [p["p99_ms"] for p in points]
    text = Text()
    text.append(f"QPS {last.get('qps', 0.0):8.1f}  ", style="bold")
    text.append(sparkline(qps), style="green")
    now_p99 = last.get("p99_ms")
    text.append(f"\np99 {'-' if now_p99 is None else f'{now_p99:.1f}':>5} ms ", style="bold")
    text.append(sparkline(p99), style="magenta")
    return text


def key_headers(key: str | None) -> dict[str, str]:
    """The Authorization header for a key, if one is given."""
    return {"authorization": f"Bearer {key}"} if key else {}


def watch_status(url: str, interval_s: float = 2.0, api_key: str | None = None) -> int:
    """Redraw the cluster table with QPS and p99 sparklines every `interval_s` until Ctrl-C; return an exit code.

    Ctrl-C and SIGTERM set a flag the loop checks between reads, rather than raising inside an HTTP read,
    and are taken even where they were inherited as ignored (a process started in the background of a
    script ignores SIGINT, and Python then never raises KeyboardInterrupt: found in CI, a watcher that
    outlived its test).
    """
    base = url.rstrip("/")
    console = _console()
    window = max(1, round(interval_s))
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        client = httpx.Client(timeout=5.0, headers=key_headers(api_key))
        with client, Live(console=console, auto_refresh=False) as live:
            while not stop.is_set():
                try:
                    cluster = client.get(f"{base}/v1/cluster").raise_for_status().json()
                    history = client.get(f"{base}/v1/cluster/history", params={"window_s": window}).raise_for_status()
                    stamp = Text(f"{base} · {time.strftime('%H:%M:%S')} · Ctrl-C to stop", style="dim")
                    table = cluster_table(cluster, console)
                    live.update(Group(table, history_text(history.json()), stamp), refresh=True)
                except httpx.HTTPError as exc:
                    live.update(Text(f"cannot read {base}/v1/cluster: {exc}", style="red"), refresh=True)
                stop.wait(interval_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def show_status(url: str, api_key: str | None = None) -> int:
    """Fetch /v1/cluster (with a key, when the gateway protects it) and print it; return an exit code."""
    console = _console()
    try:
        reply = httpx.get(f"{url.rstrip('/')}/v1/cluster", headers=key_headers(api_key), timeout=5.0)
        reply.raise_for_status()
    except httpx.HTTPError as exc:
        console.print(f"[red]cannot read {url}/v1/cluster: {exc}[/red]")
        return 1
    console.print(cluster_table(reply.json(), console))
    return 0


def set_drain(url: str, backend: str, drained: bool, admin_key: str | None = None) -> int:
    """Ask the gateway to drain or undrain a backend (with an admin key, if given); print its new state."""
    console = Console()
    action = "drain" if drained else "undrain"
    try:
        reply = httpx.post(
            f"{url.rstrip('/')}/v1/cluster/{backend}/{action}", headers=key_headers(admin_key), timeout=5.0
        )
    except httpx.HTTPError as exc:
        console.print(f"[red]cannot reach {url}: {exc}[/red]")
        return 1
    if reply.status_code != 200:
        console.print(f"[red]{reply.json().get('error', reply.text)}[/red]")
        return 1
    console.print(f"{backend}: {reply.json()['state']}")
    return 0
