"""`depthserve sim`: a shipped scenario by name, a table on the terminal, table, JSON and plots on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def test_a_shipped_scenario_runs_and_writes_its_table_results_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "depthserve", "sim", "four_workers", "--compare", "round_robin,least_latency",
         "--load", "0.5,0.8", "--duration", "4", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "least_latency" in done.stdout and "p99 ms" in done.stdout and "requests simulated" in done.stdout
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [(r["policy"], r["load"]) for r in runs] == [
        ("round_robin", 0.5), ("least_latency", 0.5), ("round_robin", 0.8), ("least_latency", 0.8)
    ]  # fmt: skip
    assert all(r["sent"] == r["ok"] + sum(r["failed"].values()) for r in runs)
    assert (out / "table.md").read_text().startswith("| policy |")
    assert (out / "latency_vs_load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_timeline_is_drawn_around_events_and_a_bad_name_is_one_line(tmp_path: Path) -> None:
    scenario = tmp_path / "kill.yaml"
    scenario.write_text(
        "fleet: [{kind: A100, count: 3}]\nduration_s: 6\nwarmup_s: 1\nload: 0.5\n"
        "events: [{at_s: 3, action: kill, workers: [1]}]\npolicies: [p2c]\n"
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "depthserve", "sim", str(scenario), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (out / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    missing = subprocess.run(
        [sys.executable, "-m", "depthserve", "sim", "no_such_scenario"], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 2 and "shipped:" in missing.stderr and "Traceback" not in missing.stderr


def test_another_seed_is_another_draw_of_the_same_world_and_a_seed_repeats(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from depthserve.sim.command import main

    def runs(seed: int, name: str) -> list[dict[str, object]]:
        out = tmp_path / name
        assert main("four_workers", "p2c", "0.8", 4.0, out, Console(file=io.StringIO()), seed) == 0
        found = json.loads((out / "results.json").read_text())["runs"]
        return [{key: value for key, value in run.items() if key != "wall_s"} for run in found]  # all but the clock

    assert runs(5, "a") == runs(5, "b") != runs(6, "c")


def test_runs_in_several_processes_give_the_same_cells_in_sweep_order_and_each_is_written_as_it_ends(
    tmp_path: Path,
) -> None:
    import io

    from rich.console import Console

    from depthserve.sim.command import run_all, summary
    from depthserve.sim.runner import RunResult
    from depthserve.sim.scenario import load_scenario, shipped_scenarios

    scenario = load_scenario(shipped_scenarios()["four_workers"]).model_copy(update={"duration_s": 3.0})
    policies, loads = ["round_robin", "least_latency"], [0.5, 0.8]
    seen: list[int] = []
    console = Console(file=io.StringIO())
    alone = run_all(scenario, policies, loads, console)
    together = run_all(scenario, policies, loads, console, jobs=2, written=lambda done: seen.append(len(done)))

    def figures(results: list[RunResult]) -> list[dict[str, object]]:
        runs = summary(results)["runs"]
        assert isinstance(runs, list)
        return [{k: v for k, v in run.items() if k != "wall_s"} for run in runs]

    assert [(r.policy, r.load) for r in together] == [(p, load) for load in loads for p in policies]
    assert figures(together) == figures(alone)
    assert seen == [1, 2, 3, 4]  # the cells done so far, handed over as each one ends


def test_a_policy_gets_its_own_options_from_the_scenario_and_a_wrong_one_is_refused() -> None:
    from depthserve.sim.runner import policy_settings, run
    from depthserve.sim.scenario import Scenario

    scenario = Scenario.model_validate(
        {"fleet": [{"kind": "A100", "count": 4}], "duration_s": 1, "warmup_s": 0,
         "policy_options": {"score": {"sample_size": 2}}}
    )  # fmt: skip
    assert policy_settings(scenario, "score")[0].policy_options == {"sample_size": 2}
    assert policy_settings(scenario, "p2c")[0].policy_options == {}  # the others keep their defaults
    assert run(scenario, "score", 0.5).stats.ok > 0
    wrong = scenario.model_copy(update={"policy_options": {"score": {"sample_size": 1}}})
    with pytest.raises(ValueError, match="sample_size"):
        run(wrong, "score", 0.5)


def test_a_run_that_fails_in_another_process_stops_the_sweep_with_its_error() -> None:
    import io

    from rich.console import Console

    from depthserve.sim.command import run_all
    from depthserve.sim.scenario import Scenario

    scenario = Scenario.model_validate({"fleet": [{"kind": "A100", "count": 2}], "duration_s": 1, "warmup_s": 0})
    with pytest.raises(ValueError, match="no_such_policy"):
        run_all(scenario, ["no_such_policy", "p2c"], [0.5, 0.8], Console(file=io.StringIO()), jobs=2)


def test_the_cell_processes_of_a_sweep_end_with_it_when_it_is_killed_outright(tmp_path: Path) -> None:
    """`kill -9` of a `--jobs 2` sweep leaves no cell process running on: each watches the sweep that started it."""
    sweep = subprocess.Popen(
        [sys.executable, "-m", "depthserve", "sim", "four_workers", "--compare", "round_robin,p2c", "--load", "0.5",
         "--duration", "100000", "--jobs", "2", "--out", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        cells: list[int] = []
        deadline = time.monotonic() + 60
        while len(cells) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
            cells = [pid for pid in children(sweep.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(cells) == 2, "the sweep never started its two cell processes"
    finally:
        sweep.kill()
        sweep.wait()
    deadline = time.monotonic() + 20
    while any(running(pid) for pid in cells) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in cells if running(pid)]
    for pid in left:  # a failing run must not leave cells busy for the rest of the suite
        os.kill(pid, signal.SIGKILL)
    assert not left


def children(pid: int) -> list[int]:
    """The pids whose parent is `pid`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # gone meanwhile
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Whether a process exists and is not a zombie (an orphan's reaper may be slow to collect it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
