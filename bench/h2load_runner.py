"""Drive h2load (nghttp2) for benchmarks and turn its per-request log into req/s, p50 and p99."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class LoadResult:
    """One h2load run: counts, throughput and latency percentiles in milliseconds."""

    label: str
    requests: int
    failed: int
    rps: float
    p50_ms: float
    p99_ms: float


def require_h2load() -> str:
    """Find h2load or stop with the install command."""
    path = shutil.which("h2load")
    if path is None:
        raise SystemExit("h2load not found: apt-get install nghttp2-client")
    return path


def run_h2load(
    label: str,
    url: str,
    body: bytes,
    headers: dict[str, str],
    requests: int,
    streams: int,
    core: int | None = None,
    warmup: int = 200,
    connections: int = 1,
    prefix: Sequence[str] = (),
) -> LoadResult:
    """Send `requests` POSTs (GETs when `body` is empty) with `streams` in flight on each of `connections`
    HTTP/2 connections; `core` pins h2load to one core, `prefix` runs it through any launcher."""
    h2load = require_h2load()
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "body"
        body_file.write_bytes(body)
        log = Path(tmp) / "log.tsv"
        args = [h2load, "-c", str(connections), "-m", str(streams)] + (["-d", str(body_file)] if body else [])
        for name, value in headers.items():
            args += ["-H", f"{name}: {value}"]
        if core is not None and shutil.which("taskset"):
            prefix = ["taskset", "-c", str(core)]
        subprocess.run([*prefix, *args, "-n", str(warmup), url], check=True, capture_output=True, timeout=120)
        out = subprocess.run(
            [*prefix, *args, "-n", str(requests), f"--log-file={log}", url],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        )
        rows = [line.split("\t") for line in log.read_text().splitlines() if line]
    starts = np.array([int(r[0]) for r in rows], dtype=np.float64)
    status = np.array([int(r[1]) for r in rows])
    took = np.array([int(r[2]) for r in rows], dtype=np.float64) / 1000.0
    ok = status == 200
    span_s = (max(starts + took * 1000.0) - min(starts)) / 1e6 if len(rows) else float("nan")
    failed = requests - int(ok.sum())
    if "failed" in out.stdout and failed == 0:
        failed = _failed_from_summary(out.stdout)
    return LoadResult(
        label,
        requests,
        failed,
        ok.sum() / span_s,
        float(np.percentile(took[ok], 50)),
        float(np.percentile(took[ok], 99)),
    )


def _failed_from_summary(stdout: str) -> int:
    for line in stdout.splitlines():
        if line.startswith("requests:"):
            parts = line.replace(",", "").split()
            return int(parts[parts.index("failed") - 1]) + int(parts[parts.index("errored") - 1])
    return 0
