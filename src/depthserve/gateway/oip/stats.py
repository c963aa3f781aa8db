"""Per-model inference statistics as the gateway sees them, in Triton's statistics shape (perf_analyzer reads it).

The gateway measures whole requests (admission, dispatch, retries, the backend), so its success and
fail times are end to end; queue and compute phases belong to the backends and stay zero here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_ROWS = 1024  # (model, version) pairs kept; a backend lax about versions cannot grow the table past this
PHASES = ("queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


@dataclass
class _Counts:
    success: int = 0
    success_ns: int = 0
    fail: int = 0
    fail_ns: int = 0
    last_ms: int = 0


class ModelStats:
    """Counts inferences per (model, version); one owner, the gateway's event loop."""

    def __init__(self, wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self._wall_ms = wall_ms
        self._counts: dict[tuple[str, str], _Counts] = {}

    def record(self, model: str, version: str, ok: bool, elapsed_ns: int) -> None:
        """Count one finished inference and its end-to-end time."""
        counts = self._counts.get((model, version))
        if counts is None:
            if len(self._counts) >= MAX_ROWS:
                return
            counts = self._counts[(model, version)] = _Counts()
        if ok:
            counts.success += 1
            counts.success_ns += elapsed_ns
        else:
            counts.fail += 1
            counts.fail_ns += elapsed_ns
        counts.last_ms = self._wall_ms()

    def has(self, model: str, version: str) -> bool:
        """Whether (model, version) already has a row."""
        return (model, version) in self._counts

    def report(self, model: str = "", version: str = "") -> dict[str, Any]:
        """Give `{"model_stats": [...]}` for one model (and version) or, with no model, every model seen."""
        rows = []
        for (name, ver), counts in sorted(self._counts.items()):
            if model and (name != model or (version and ver != version)):
                continue
            rows.append(_row(name, ver, counts))
        if model and not rows:
            rows.append(_row(model, version, _Counts()))
        return {"model_stats": rows}


def _row(name: str, version: str, counts: _Counts) -> dict[str, Any]:
    zero = {"count": 0, "ns": 0}
    return {
        "name": name,
        "version": version,
        "last_inference": counts.last_ms,
        "inference_count": counts.success,
        "execution_count": counts.success,
        "inference_stats": {
            "success": {"count": counts.success, "ns": counts.success_ns},
            "fail": {"count": counts.fail, "ns": counts.fail_ns},
            **{phase: dict(zero) for phase in PHASES},
        },
        "batch_stats": [],
    }
