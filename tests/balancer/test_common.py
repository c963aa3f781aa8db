"""Shared machinery: option parsing, weights and draining, unknown loads, exclusion, stable hashing."""

from __future__ import annotations

import math

import pytest

from depthserve.balancer import BackendView
from depthserve.balancer.common import (
    MAX_WEIGHT,
    MIN_WEIGHT,
    HashTable,
    Options,
    exclude_overloaded,
    fill_median,
    fill_worst,
    latency_ms,
    mem_fraction,
    min_max,
    outstanding,
    split_drained,
    stable_hash,
    weight_of,
)
from depthserve.protocol.load_report import LoadReport
from depthserve.testing.snapshots import report


def test_options_defaults_clamps_and_refusals() -> None:
    parse = Options("demo", {"a": 5, "b": "0.25", "c": "yes", "d": "x"})
    assert parse.number("a", 1.0, 0.0, 2.0, clamp=True) == 2.0
    assert parse.number("b", 1.0, 0.0, 1.0) == 0.25
    assert parse.boolean("c", False) is True
    assert parse.choice("d", "x", ("x", "y")) == "x"
    assert parse.integer("e", 7, 0, 10) == 7
    parse.done()
    with pytest.raises(ValueError, match=r"demo: option 'a' must lie in \[0, 2\], got 5"):
        Options("demo", {"a": 5}).number("a", 1.0, 0.0, 2.0)
    strict = Options("demo", {"a": 1, "typo": 2, "other": 3})
    strict.number("a", 1.0, 0, 2)
    with pytest.raises(ValueError, match="unknown option.*'other', 'typo'; known: a"):
        strict.done()


def test_weights_clamp_and_drain() -> None:
    assert weight_of(BackendView("a", weight=math.inf)) == MAX_WEIGHT
    assert weight_of(BackendView("a", weight=1e-30)) == MIN_WEIGHT
    assert weight_of(BackendView("a", weight=math.nan)) == 0.0
    serving, weights, drained = split_drained([BackendView("a", weight=2), BackendView("z", weight=0)])
    assert [b.id for b in serving] == ["a"] and weights == [2.0] and [b.id for b in drained] == ["z"]
    serving, weights, drained = split_drained([BackendView("y", weight=-1), BackendView("z", weight=0)])
    assert [b.id for b in serving] == ["y", "z"] and weights == [1.0, 1.0] and drained == []


def test_unknown_loads_count_as_worst_known_and_latency_as_median() -> None:
    assert fill_worst([None, 3.0, 1.0]) == [3.0, 3.0, 1.0]
    assert fill_worst([None, None]) == [0.0, 0.0]
    assert fill_median([0.0, 10.0, 30.0]) == [20.0, 10.0, 30.0]
    assert fill_median([0.0, 10.0, 30.0, 40.0]) == [30.0, 10.0, 30.0, 40.0]
    assert fill_median([0.0, 0.0]) == [1.0, 1.0]
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5]
    assert min_max([5.0, 5.0]) == [0.0, 0.0]


def test_load_reads_treat_garbage_as_unknown() -> None:
    assert outstanding(None) is None
    assert outstanding(report(queue=3, running=2)) == 5
    assert mem_fraction(LoadReport(mem_used=10, mem_total=0)) is None
    assert mem_fraction(LoadReport(mem_used=1, mem_total=4)) == 0.25
    assert latency_ms(BackendView("a", ewma_ms=5, peak_ewma_ms=math.nan)) == 5
    assert latency_ms(BackendView("a", ewma_ms=5, peak_ewma_ms=9)) == 9
    assert latency_ms(BackendView("a", ewma_ms=5, peak_ewma_ms=9), "ewma") == 5
    assert latency_ms(BackendView("a", ewma_ms=-1)) == 0.0


def test_exclusion_panics_rather_than_refusing() -> None:
    hot = BackendView("hot", load=report(temp=90))
    full = BackendView("full", load=report(mem=0.99))
    unknown = BackendView("unknown")
    assert exclude_overloaded([hot, full, unknown], 85, 0.95) == [unknown]
    assert exclude_overloaded([hot, full], 85, 0.95) == [hot, full]


def test_stable_hash_is_pinned() -> None:
    assert stable_hash("") == stable_hash("")
    assert stable_hash("session-1") != stable_hash("session-2")
    assert stable_hash("a") == int.from_bytes(__import__("hashlib").blake2b(b"a", digest_size=8).digest(), "big")
    assert isinstance(stable_hash("\ud800"), int)  # lone surrogates from odd headers still hash


def test_hash_table_walk_lists_distinct_owners_then_slotless_ids() -> None:
    table = HashTable(["a", "b", "c", "d"], ["b", "a", "b", "c"])
    assert table.walk(2) == ["b", "c", "a", "d"]
    assert table.slot(7) == 3


def test_integers_refuse_fractions_and_clamp_infinity() -> None:
    assert Options("demo", {"n": "inf"}).integer("n", 1, 1, 10, clamp=True) == 10
    assert Options("demo", {"n": 4.0}).integer("n", 1, 1, 10) == 4
    with pytest.raises(ValueError, match="whole number"):
        Options("demo", {"n": 2.5}).integer("n", 1, 1, 10)
    with pytest.raises(ValueError, match="must lie in"):
        Options("demo", {"n": "-inf"}).integer("n", 1, 1, 10)
