"""bench/sim_calibrate.py: the own time it solves for, the scenario it writes, and a real calibration run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from depthserve.sim.command import resolve
from depthserve.sim.scenario import load_scenario

BENCH = Path(__file__).parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import sim_calibrate  # noqa: E402  (a script beside bench/policies.py, not a package)


def test_own_time_is_what_makes_the_four_workers_complete_the_measured_rate() -> None:
    service_ms = [20.0, 20.0, 80.0, 80.0]
    for own in (0.0, 0.6, 0.75, 3.0):
        rate = sum(1000.0 / (s + own) for s in service_ms)
        assert sim_calibrate.own_time_ms(rate, service_ms) == pytest.approx(own, abs=1e-6)


def test_the_calibrated_scenario_is_the_shipped_one_at_this_sittings_own_time_and_edge(tmp_path: Path) -> None:
    shipped = resolve("four_workers")
    written = tmp_path / "today.yaml"
    written.write_text(sim_calibrate.calibrated(shipped.read_text(), 0.75, 2.1, "measured now"))
    scenario, base = load_scenario(written), load_scenario(shipped)
    assert (scenario.worker.overhead_ms, scenario.edge_ms) == (0.75, 2.1)
    # Everything else is the shipped scenario's: the same fleet, draws and policies, so the live bench replays it.
    assert scenario.model_copy(update={"worker": base.worker, "edge_ms": base.edge_ms}) == base
    assert scenario.capacity_rps() == pytest.approx(2 * 1000 / 20.75 + 2 * 1000 / 80.75)
    assert written.read_text().startswith("# measured now\n")


def test_a_scenario_without_the_two_figures_is_refused_not_half_calibrated() -> None:
    with pytest.raises(SystemExit, match="overhead_ms"):
        sim_calibrate.calibrated("name: x\nedge_ms: 1\n", 0.7, 2.0, "note")


def test_a_machine_that_moved_past_the_tolerances_is_told_apart_from_one_that_holds() -> None:
    base = load_scenario(resolve("four_workers"))  # own 0.6 ms, edge 2.2 ms
    assert not sim_calibrate.drifted(base, 0.7, 2.5)
    assert sim_calibrate.drifted(base, 0.8, 2.2)  # beyond the 0.15 ms tolerance
    assert sim_calibrate.drifted(base, 0.6, 3.0)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_short_calibration_writes_a_scenario_the_bench_and_the_simulator_load(tmp_path: Path) -> None:
    out = tmp_path / "today.yaml"
    done = subprocess.run(
        [sys.executable, str(BENCH / "sim_calibrate.py"), "--out", str(out), "--rounds", "1", "--window", "2"],
        capture_output=True,
        text=True,
        timeout=160,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scenario = load_scenario(out)
    # Real workers through a real gateway: a request costs the worker some time beside its sleep (0.7-1.1 ms here).
    assert 0.0 < scenario.worker.overhead_ms < 10.0
    assert scenario.edge_ms >= 0.0
    assert "own time" in done.stderr and "edge" in done.stderr
    assert out.read_text().startswith("# bench/sim_calibrate.py ")
