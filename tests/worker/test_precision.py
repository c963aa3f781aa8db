"""The precision a worker picks: the fastest within the stated bound of fp32, fp32 when nothing else holds."""

from __future__ import annotations

import numpy as np
import pytest

from depthserve.worker.precision import PrecisionTrial, candidates, choose, depth_error


def test_auto_tries_lower_precisions_on_a_gpu_only() -> None:
    assert candidates("auto", "cuda") == ["fp32", "bf16", "fp16"]
    assert candidates("auto", "cpu") == ["fp32"]  # a CPU stays at fp32 unless asked
    assert candidates("bf16", "cpu") == ["fp32", "bf16"]  # the reference is run to state the error
    assert candidates("fp32", "cuda") == ["fp32"]


def test_auto_takes_the_fastest_within_the_bound() -> None:
    trials = [
        PrecisionTrial("fp32", 0.040, 0.0),
        PrecisionTrial("bf16", 0.009, 0.004),
        PrecisionTrial("fp16", 0.008, 0.03),
    ]
    assert choose("auto", trials, tolerance=0.02).precision == "bf16"  # fp16 is faster but too far from fp32
    assert choose("auto", trials, tolerance=0.05).precision == "fp16"
    assert choose("auto", trials, tolerance=0.001).precision == "fp32"


def test_a_broken_precision_is_never_chosen() -> None:
    trials = [PrecisionTrial("fp32", 0.04, 0.0), PrecisionTrial("fp16", 0.001, float("inf"))]
    assert choose("auto", trials, tolerance=1e9).precision == "fp32"


def test_an_explicit_precision_is_kept_whatever_its_error() -> None:
    trials = [PrecisionTrial("fp32", 0.04, 0.0), PrecisionTrial("fp16", 0.03, 0.5)]
    assert choose("fp16", trials, tolerance=0.02).precision == "fp16"


def test_depth_error_is_relative_over_pixels_fp32_finds() -> None:
    reference = np.array([[1.0, 2.0], [np.inf, 0.0]], np.float32)  # masked and empty pixels are not compared
    depth = np.array([[1.01, 2.0], [5.0, np.nan]], np.float32)
    p99, mean = depth_error(depth, reference)
    assert p99 == pytest.approx(0.01 * 0.99, rel=1e-3) and mean == pytest.approx(0.005, rel=1e-3)
    assert depth_error(np.array([[np.nan, 2.0]]), np.array([[1.0, 2.0]])) == (float("inf"), float("inf"))
    assert depth_error(reference, reference) == (0.0, 0.0)
