"""`depthserve sim SCENARIO.yaml`: run the scenario's policies at its loads, show a table, write plots."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from depthserve.parent_death import PARENT_PID_ENV, end_with_parent
from depthserve.sim import report
from depthserve.sim.runner import RunResult, run
from depthserve.sim.scenario import Scenario, load_scenario, shipped_scenarios


def resolve(name: str) -> Path:
    """A scenario file, or the name of a shipped one (`depthserve sim four_workers`)."""
    path = Path(name)
    if path.exists():
        return path
    shipped = shipped_scenarios()
    if name in shipped:
        return shipped[name]
    raise ValueError(f"no scenario file {name!r}, and no shipped scenario of that name; shipped: {', '.join(shipped)}")


def run_all(
    scenario: Scenario,
    policies: Sequence[str],
    loads: Sequence[float],
    console: Console,
    jobs: int = 1,
    written: Callable[[list[RunResult]], None] | None = None,
) -> list[RunResult]:
    """Every policy at every load, on the same arrivals per load, with a progress bar.

    Each cell is a run of its own (its own loop, gateway and world), so `jobs` > 1 runs cells in that many
    processes; `written` is given the cells done so far as each ends, so a long sweep stopped part-way
    keeps what it finished. Results come back in sweep order whatever order the cells end in.
    """
    cells = [(load, policy) for load in loads for policy in policies]
    done: dict[tuple[float, str], RunResult] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(scenario.name, total=len(cells))

        def finished(result: RunResult) -> None:
            done[(result.load, result.policy)] = result
            progress.advance(task)
            if written is not None:
                written([done[cell] for cell in cells if cell in done])

        if jobs <= 1:
            for load, policy in cells:
                progress.update(task, description=f"{scenario.name}: {policy} at {load:.0%}")
                finished(run(scenario, policy, load))
        else:
            progress.update(task, description=f"{scenario.name}: {len(cells)} runs in {jobs} processes")
            context = multiprocessing.get_context("spawn")  # no fork of a process with a progress thread
            with ProcessPoolExecutor(
                jobs, mp_context=context, initializer=_cell_process, initargs=(os.getpid(),)
            ) as pool:
                pending = [pool.submit(run, scenario, policy, load) for load, policy in cells]
                try:
                    for future in as_completed(pending):
                        finished(future.result())
                except BaseException:  # a failed run or Ctrl-C: the cells not started yet are not run
                    pool.shutdown(wait=False, cancel_futures=True)
                    raise
    return [done[cell] for cell in cells]


def _cell_process(sweep: int) -> None:
    """Start a cell process that ends with the sweep that started it, even one killed outright: a cell runs for
    minutes, and one left behind would go on taking a core."""
    os.environ[PARENT_PID_ENV] = str(sweep)
    end_with_parent()


def summary(results: Sequence[RunResult]) -> dict[str, object]:
    """The figures as JSON, for scripts and the benchmarks page."""
    return {
        "runs": [
            {
                "policy": r.policy,
                "load": r.load,
                "sent": r.stats.sent,
                "ok": r.stats.ok,
                "failed": dict(r.stats.failed),
                "p50_ms": r.stats.latency.quantile(0.5),
                "p95_ms": r.stats.latency.quantile(0.95),
                "p99_ms": r.stats.latency.quantile(0.99),
                "goodput_rps": r.stats.within_slo / r.measured_s,
                "retries": r.retries,
                "hedges": r.hedges,
                "wall_s": round(r.wall_s, 2),
                "events": r.events,
            }
            for r in results
        ]
    }


def main(
    name: str,
    policies: str | None,
    loads: str | None,
    duration_s: float | None,
    out: Path | None,
    console: Console,
    seed: int | None = None,
    jobs: int = 1,
) -> int:
    """Run, print the table, and write table, JSON and plots under `out`; the exit code."""
    scenario = load_scenario(resolve(name))
    if duration_s is not None:
        scenario = scenario.model_copy(update={"duration_s": duration_s})
    if seed is not None:  # another draw of the same world: how much of a difference is luck
        scenario = scenario.model_copy(update={"seed": seed})
    chosen = [p.strip() for p in policies.split(",")] if policies else scenario.policies
    sweep = [float(x) for x in loads.split(",")] if loads else scenario.offered_loads()
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results = run_all(scenario, chosen, sweep, console, jobs, None if out is None else lambda done: write(done, out))
    wall = time.perf_counter() - started
    simulated = sum(r.requests for r in results) or 1
    console.print(report.table(results, f"{scenario.name}: {scenario.workers} workers, {scenario.duration_s:g} s"))
    console.print(f"{simulated:,} requests simulated in {wall:.1f} s ({simulated / wall:,.0f} a second)")
    bursts = scenario.arrivals.bursts
    for result in results:
        for line in report.scaling_summary(result, bursts[0].at_s if bursts else None):
            console.print(line)
    if out is not None:
        if len(sweep) > 1:
            report.plot_latency_against_load(results, out / "latency_vs_load.png", scenario.name)
        if scenario.events:
            at_load = [r for r in results if r.load == sweep[-1]]
            events = sorted({e.at_s for e in scenario.events})
            report.plot_timeline(at_load, out / "timeline.png", f"{scenario.name} at {sweep[-1]:.0%}", events)
        for result in results:
            if result.scaling is not None:
                name = f"scaling_{result.policy}_{round(result.load * 100)}.png"
                report.plot_scaling(result, out / name, f"{scenario.name}: {result.policy}")
        console.print(f"written to {out}")
    return 0


def write(results: Sequence[RunResult], out: Path) -> None:
    """The table and the JSON of the cells done so far (rewritten as each cell ends)."""
    (out / "table.md").write_text(report.markdown(results))
    (out / "results.json").write_text(json.dumps(summary(results), indent=2))
