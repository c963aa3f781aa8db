"""Which precision a worker computes in: the fastest whose depth stays within a stated bound of fp32.

The bound is on the 99th percentile of the relative depth difference from fp32, |d - d_fp32| / d_fp32,
over the pixels where the fp32 depth is finite and positive, on one fixed RGB-D input at warm-up; a
precision that gives a non-finite depth where fp32 gives a finite one fails at any bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_TOLERANCE = 0.02  # p99 relative depth error allowed against fp32 (2%)
LOWER_PRECISIONS = ("bf16", "fp16")


@dataclass(frozen=True)
class PrecisionTrial:
    """One precision run on the fixed input: its best time and its depth error against fp32."""

    precision: str
    seconds: float  # best time on the fixed input; 0 when it was not run (fp32 alone)
    error: float  # p99 relative depth error against fp32 (0 for fp32; inf when it broke a finite pixel)
    mean_error: float = 0.0

    def describe(self) -> str:
        """Say the trial in a few words for the start-up log."""
        if not self.seconds:
            return f"{self.precision} (the only candidate: not run)"
        return f"{self.precision} {self.seconds * 1000:.1f} ms, p99 error {self.error:.2%}"


def candidates(requested: str, device_type: str) -> list[str]:
    """The precisions to try at warm-up, fp32 (the reference) first; `auto` on a CPU is fp32 alone."""
    if requested == "auto":
        return ["fp32", *LOWER_PRECISIONS] if device_type == "cuda" else ["fp32"]
    return ["fp32"] if requested == "fp32" else ["fp32", requested]


def depth_error(depth: np.ndarray, reference: np.ndarray) -> tuple[float, float]:
    """Give (p99, mean) of |depth - reference| / reference over the pixels where the reference is finite and > 0."""
    valid = np.isfinite(reference) & (reference > 0)
    if not valid.any():
        return 0.0, 0.0
    if not np.isfinite(depth[valid]).all():
        return float("inf"), float("inf")
    relative = np.abs(depth[valid].astype(np.float64) - reference[valid]) / reference[valid]
    return float(np.quantile(relative, 0.99)), float(relative.mean())


def choose(requested: str, trials: Sequence[PrecisionTrial], tolerance: float) -> PrecisionTrial:
    """Give the requested precision's trial, or for `auto` the fastest within `tolerance` (fp32 always is)."""
    by_name = {trial.precision: trial for trial in trials}
    if requested != "auto":
        return by_name[requested]
    passing = [trial for trial in trials if trial.precision == "fp32" or trial.error <= tolerance]
    return min(passing, key=lambda trial: trial.seconds)
