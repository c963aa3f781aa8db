"""bench/policies.py and bench/sim_validate.py: each cell runs, is written, read back and simulated at its length."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from depthserve.testing.load import LoadStats

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import policies  # noqa: E402  (scripts beside each other, not a package)
import sim_validate  # noqa: E402

OLD_TABLE = (  # bench/policies.py --markdown before the seconds column
    "| policy | load | ok/s | failed | p50 ms | p95 ms | p99 ms | share fast/slow | util min-max "
    "| idle while queued |\n"
    "|---|---|---|---|---|---|---|---|---|---|\n"
    "| round_robin | 50% | 60.9 | 0 | 38 | 150 | 292 | 50%/50% | 25%-96% | 0% |\n"
)


def cell(policy: str, load: float, seconds: float, latencies_ms: list[float]) -> policies.Cell:
    """A cell as bench/policies.py measures one: every request answered, spread evenly."""
    stats = LoadStats(sent=len(latencies_ms), ok=len(latencies_ms), latencies_ms=latencies_ms, duration_s=seconds)
    return policies.Cell(policy, load, stats, [0.25] * 4, [0.5] * 4, 0.0, seconds)


def test_each_cell_is_read_back_at_the_length_bench_policies_ran_it(tmp_path: Path) -> None:
    table = tmp_path / "run1.md"
    latencies = [float(ms) for ms in range(1, 102)]  # p50 51 ms, p99 100 ms
    policies.render([cell("score", 0.5, 30, latencies), cell("score", 0.95, 120, latencies[:41])], table)
    figures, lengths = sim_validate.read_live(table, seconds=15)
    assert lengths == {("score", 0.5): 30, ("score", 0.95): 120}
    assert figures == {("score", 0.5): (51, 100), ("score", 0.95): (21, 41)}


def test_a_table_written_before_the_seconds_column_is_read_at_the_length_given(tmp_path: Path) -> None:
    table = tmp_path / "old.md"
    table.write_text(OLD_TABLE)
    figures, lengths = sim_validate.read_live(table, seconds=30)
    assert figures == {("round_robin", 0.5): (38, 292)}
    assert lengths == {("round_robin", 0.5): 30}


def test_runs_of_one_cell_at_two_lengths_are_refused_not_averaged() -> None:
    short, long = Path("short.md"), Path("long.md")
    assert sim_validate.cell_lengths([(short, {("p2c", 0.8): 120}), (long, {("p2c", 0.8): 120})]) == {("p2c", 0.8): 120}
    with pytest.raises(SystemExit, match="p2c at 80% ran 30 s in short.md and 120 s in long.md"):
        sim_validate.cell_lengths([(short, {("p2c", 0.8): 30}), (long, {("p2c", 0.8): 120})])


def test_each_cell_is_simulated_for_as_long_as_it_ran_live() -> None:
    quiet, busy = ("round_robin", 0.5), ("round_robin", 0.95)
    together = sim_validate.simulate("four_workers", {quiet: 2.0, busy: 6.0}, seeds=[1], jobs=1)
    apart = [sim_validate.simulate("four_workers", {c: t}, [1], jobs=1)[0] for c, t in ((quiet, 2.0), (busy, 6.0))]
    assert together == [apart[0] | apart[1]]
    # The quiet cell at the busy one's length is another measurement: the length reached the simulator.
    assert sim_validate.simulate("four_workers", {quiet: 6.0}, seeds=[1], jobs=1)[0][quiet] != together[0][quiet]


def test_the_live_cells_send_the_simulators_arrivals_for_their_own_length() -> None:
    same = policies.SameDraws.of("four_workers", seed=1, warmup=2.0, service_ms=20.0)
    short, long = same.schedule(0.8, 30.0), same.schedule(0.8, 120.0)
    assert short == long[: len(short)]  # the same draws, the longer cell going on where the shorter stops
    assert 31 < short[-1][0] < 32 and 121 < long[-1][0] < 122  # warm-up + measured window


def test_duration_at_names_loads_and_seconds_or_says_what_it_expected() -> None:
    assert policies.seconds_per_load("0.8=120,0.95=120") == {0.8: 120.0, 0.95: 120.0}
    for wrong in ("0.8", "0.8=0", "x=3", "0.8=long"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected LOAD=SECONDS"):
            policies.seconds_per_load(wrong)


def test_the_measured_lengths_are_said_with_the_loads_that_ran_them() -> None:
    cells = {("a", 0.5): 30.0, ("b", 0.5): 30.0, ("a", 0.8): 120.0, ("a", 0.95): 120.0}
    assert sim_validate.lengths_said(cells) == "30 s at 50%, 120 s at 80% and 95%"
