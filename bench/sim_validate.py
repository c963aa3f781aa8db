"""The simulator against the live cluster: `four_workers` at many seeds beside `bench/policies.py`'s tables.

One run of a cell is one draw: at 15-60 s a cell's p99 rests on tens of requests from a lognormal
sigma-1 tail, and two runs of the same code (live or simulated) differ by more than 30% in several
cells. So each live cell is compared with the simulator's median over seeds (within 30%?) and placed
in the simulator's spread (how many seeds read lower); the ranking of the policies is compared per load
and percentile (Spearman's rho, and whether the same policy is first). The simulator against itself
(each seed against the median of the others) is printed beside it: the agreement its noise allows.

    python bench/policies.py --duration 15 --ports 50461,50462,50463,50464 --markdown live1.md
    python bench/policies.py --duration 15 --ports 50461,50462,50463,50464 --seed 1 --markdown live2.md
    python bench/sim_validate.py live1.md live2.md --seeds 1-13 --markdown validation.md

With common random numbers (each live run replays one seed's draws), luck is out of the comparison:

    python bench/policies.py --duration 15 --same-draws four_workers --seed 1 --markdown same1.md
    python bench/sim_validate.py same1.md --seeds 1 --paired

Two live runs of the same seed's draws (`same1.md same1b.md --seeds 1,1 --paired`) are also compared with
each other: they differ only by the machine's timing, which bounds the agreement the simulator can show.
The simulator's counterpart of that variation is its gateway's own timing (the health checks' jitter), redrawn
by jitter seeds over one seed's draws: the median of several live runs against the median over jitter seeds,

    python bench/sim_validate.py same1.md same2.md same3.md --seeds 1 --jitter-seeds 1-15

Each cell is simulated for as long as the live one ran (the table's seconds column: `bench/policies.py --duration 30
--duration-at 0.8=120,0.95=120` runs the queue-bound loads longer); `--duration` gives the length of a table
written before that column.

The 95% cells hang on fractions of a millisecond of a worker's own time a request, which this machine reads
differently from one day to the next: calibrate in the same sitting as the live runs and give both sides the
calibrated copy (`bench/sim_calibrate.py` says how), `--same-draws today.yaml` and `--scenario today.yaml`.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from depthserve.sim.command import resolve, run_all
from depthserve.sim.scenario import load_scenario

Cell = tuple[str, float]  # (policy, load)
Figures = dict[Cell, tuple[float, float]]  # p50 and p99 in ms
WITHIN = 1.3


def read_live(path: Path, seconds: float) -> tuple[Figures, dict[Cell, float]]:
    """The p50 and p99 of each row of a `bench/policies.py --markdown` table, and each cell's measured seconds
    (its last column; `seconds` for a table written before it had one)."""
    figures: Figures = {}
    lengths: dict[Cell, float] = {}
    for line in path.read_text().splitlines():
        fields = [field.strip() for field in line.strip().strip("|").split("|")]
        if len(fields) < 7 or not fields[1].endswith("%") or fields[4] == "nan":
            continue
        cell = (fields[0], round(float(fields[1][:-1]) / 100, 4))
        figures[cell] = (float(fields[4]), float(fields[6]))
        lengths[cell] = float(fields[10]) if len(fields) > 10 else seconds
    if not figures:
        raise SystemExit(f"{path}: no table rows of bench/policies.py")
    return figures, lengths


def cell_lengths(tables: Sequence[tuple[Path, dict[Cell, float]]]) -> dict[Cell, float]:
    """The measured seconds of the cells every table holds; runs of one cell at two lengths are not one cell."""
    cells = set.intersection(*(set(lengths) for _, lengths in tables))
    first_path, first = tables[0]
    for path, lengths in tables[1:]:
        for cell in sorted(cells):
            if lengths[cell] != first[cell]:
                raise SystemExit(
                    f"{cell[0]} at {cell[1]:.0%} ran {first[cell]:g} s in {first_path} and {lengths[cell]:g} s in "
                    f"{path}: compare runs of the same length"
                )
    return {cell: first[cell] for cell in cells}


def ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 0, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            result[order[position]] = (start + end) / 2
        start = end + 1
    return result


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Rank correlation of two readings of the same policies."""
    ra, rb = ranks(a), ranks(b)
    mean = (len(a) - 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb, strict=True))
    spread = (sum((x - mean) ** 2 for x in ra) * sum((y - mean) ** 2 for y in rb)) ** 0.5
    return cov / spread if spread else float("nan")


def agreement(measured: Figures, reference: Figures) -> tuple[int, int, int, list[float], int]:
    """Cells (p50, p99) within 30% of the reference, their count, and per load x percentile rho and same-first."""
    cells = sorted(set(measured) & set(reference))
    p50 = sum(1 / WITHIN <= measured[c][0] / reference[c][0] <= WITHIN for c in cells)
    p99 = sum(1 / WITHIN <= measured[c][1] / reference[c][1] <= WITHIN for c in cells)
    rhos, same_first = [], 0
    for load in sorted({c[1] for c in cells}):
        policies = sorted(c[0] for c in cells if c[1] == load)
        for index in (0, 1):
            a = [measured[(p, load)][index] for p in policies]
            b = [reference[(p, load)][index] for p in policies]
            rhos.append(spearman(a, b))
            same_first += a.index(min(a)) == b.index(min(b))
    return p50, p99, len(cells), rhos, same_first


def median_of(runs: Sequence[Figures]) -> Figures:
    """Each cell's median over runs, p50 and p99 apiece."""
    cells = set.intersection(*(set(run) for run in runs))
    return {c: (statistics.median(r[c][0] for r in runs), statistics.median(r[c][1] for r in runs)) for c in cells}


def simulate(
    scenario_name: str,
    cells: dict[Cell, float],
    seeds: Sequence[int],
    jobs: int,
    jitters: Sequence[int | None] = (None,),
) -> list[Figures]:
    """The scenario's figures for the live cells, one set per seed and jitter seed, each cell measured for its
    seconds after its warm-up; a jitter seed keeps the seed's arrivals and workers' draws and moves only the
    gateway's own timing."""
    scenario = load_scenario(resolve(scenario_name))
    console = Console(stderr=True)
    runs = []
    for seed in seeds:
        for jitter in jitters:
            figures: Figures = {}
            for seconds in sorted(set(cells.values())):
                group = {cell for cell, length in cells.items() if length == seconds}
                policies = sorted({c[0] for c in group})
                loads = sorted({c[1] for c in group})
                update = {"seed": seed, "jitter_seed": jitter, "duration_s": scenario.warmup_s + seconds}
                results = run_all(scenario.model_copy(update=update), policies, loads, console, jobs)
                sketches = {(r.policy, round(r.load, 4)): r.stats.latency for r in results}
                figures |= {c: (_ms(s.quantile(0.5)), _ms(s.quantile(0.99))) for c, s in sketches.items() if c in group}
            runs.append(figures)
            named = f"seed {seed}" + ("" if jitter is None else f", jitter seed {jitter}")
            console.print(f"{named}: {len(figures)} cells simulated")
    return runs


def lengths_said(cells: dict[Cell, float]) -> str:
    """Each cell length and the loads measured that long: `30 s at 50%, 120 s at 80% and 95%`."""
    said = []
    for seconds in sorted(set(cells.values())):
        loads = sorted({load for (_, load), length in cells.items() if length == seconds})
        named = [f"{load:.0%}" for load in loads]
        listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
        said.append(f"{seconds:g} s at {listed}")
    return ", ".join(said)


def _ms(quantile: float | None) -> float:
    """A cell that answered nothing has no percentile: NaN, which compares as outside any bound."""
    return float("nan") if quantile is None else quantile


SUMMARY_HEAD = (
    "",
    "| compared | p50 within 30% | p99 within 30% | Spearman (per load and percentile) | same first |",
    "|---|---|---|---|---|",
)


def summary_row(name: str, figures: tuple[int, int, int, list[float], int]) -> str:
    """One line of the agreement table: what was compared with what, and how well they agree."""
    p50, p99, count, rhos, first = figures
    return f"| {name} | {p50}/{count} | {p99}/{count} | {min(rhos):.2f}-{max(rhos):.2f} | {first}/{len(rhos)} |"


def report(live: list[Figures], sims: list[Figures]) -> list[str]:
    """The per-cell table and the agreement summary, as markdown lines."""
    sim = median_of(sims)
    live_mid = median_of(live)
    lines = [
        "| policy | load | live p50 | sim p50 median (range) | live ÷ sim | sim runs below live | live p99 "
        "| sim p99 median (range) | live ÷ sim | sim runs below live |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in sorted(set(live_mid) & set(sim), key=lambda c: (c[0], c[1])):
        row = [cell[0], f"{cell[1]:.0%}"]
        for index in (0, 1):
            readings = [run[cell][index] for run in live]
            spread = sorted(s[cell][index] for s in sims)
            ratio = live_mid[cell][index] / sim[cell][index]
            mark = "" if 1 / WITHIN <= ratio <= WITHIN else " ✗"
            below = " / ".join(str(sum(x < value for x in spread)) for value in readings)
            row += [
                " / ".join(f"{value:.0f}" for value in readings),
                f"{sim[cell][index]:.0f} ({spread[0]:.0f}-{spread[-1]:.0f})",
                f"{ratio:.2f}{mark}",
                f"{below} of {len(spread)}",
            ]
        lines.append("| " + " | ".join(row) + " |")
    lines += SUMMARY_HEAD

    lines.append(summary_row(f"live (median of {len(live)}) against the simulator's median", agreement(live_mid, sim)))
    for index, run in enumerate(live):
        lines.append(summary_row(f"live run {index + 1} against the simulator's median", agreement(run, sim)))
    if len(sims) > 1:  # one seed has no others: against itself it would read a perfect score
        for index, run in enumerate(sims):
            others = median_of([s for i, s in enumerate(sims) if i != index])
            name = f"simulator run {index + 1} against the other runs' median"
            lines.append(summary_row(name, agreement(run, others)))
    return lines


def report_paired(live: list[Figures], sims: list[Figures], seeds: Sequence[int]) -> list[str]:
    """Each live run against the simulator at the seed whose draws it replayed (`bench/policies.py --same-draws`)."""
    lines = [
        "| policy | load | live p50 | sim p50 | live ÷ sim | live p99 | sim p99 | live ÷ sim |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cell in sorted(set.intersection(*(set(r) for r in live), *(set(s) for s in sims))):
        row = [cell[0], f"{cell[1]:.0%}"]
        for index in (0, 1):
            ratios = [run[cell][index] / sim[cell][index] for run, sim in zip(live, sims, strict=True)]
            row += [
                " / ".join(f"{run[cell][index]:.0f}" for run in live),
                " / ".join(f"{sim[cell][index]:.0f}" for sim in sims),
                " / ".join(f"{r:.2f}" + ("" if 1 / WITHIN <= r <= WITHIN else " ✗") for r in ratios),
            ]
        lines.append("| " + " | ".join(row) + " |")
    lines += SUMMARY_HEAD
    rows = [
        (f"live run {i + 1} (seed {seed}'s draws) against the simulator at seed {seed}", run, sim)
        for i, (run, sim, seed) in enumerate(zip(live, sims, seeds, strict=True))
    ]
    # Two live runs of the same draws differ only by the machine's timing: the agreement a live run allows.
    rows += [
        (f"live run {j + 1} against live run {i + 1} (both seed {seeds[i]}'s draws)", live[j], live[i])
        for i in range(len(live))
        for j in range(i + 1, len(live))
        if seeds[i] == seeds[j]
    ]
    lines += [summary_row(name, agreement(measured, reference)) for name, measured, reference in rows]
    return lines


def seed_list(text: str) -> list[int]:
    """`1-13` or `1,2,5`."""
    if "-" in text:
        first, last = (int(x) for x in text.split("-"))
        return list(range(first, last + 1))
    return [int(x) for x in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("live", nargs="+", type=Path, help="tables written by bench/policies.py --markdown")
    parser.add_argument("--scenario", default="four_workers", help="the scenario that models the live cluster")
    parser.add_argument("--seeds", default="1-13", type=seed_list, help="the simulator's draws: 1-13 or 1,2,5")
    parser.add_argument(
        "--duration",
        type=float,
        default=15.0,
        help="measured seconds per cell of a table without a seconds column (bench/policies.py before 2026-12-07)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="simulated cells at once, each in its own process")
    parser.add_argument(
        "--jitter-seeds",
        type=seed_list,
        help="simulate each seed again at these jitter seeds (1-15): the same arrivals and workers' draws, the "
        "gateway's own timing redrawn, as live runs of one seed's draws differ; compare medians over them",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="the live tables replayed the simulator's draws (bench/policies.py --same-draws), one per seed of "
        "--seeds in order: compare each with the simulator at its seed",
    )
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    if args.paired and len(args.seeds) != len(args.live):
        parser.error(f"--paired: one seed per live table ({len(args.live)} tables, seeds {args.seeds})")
    if args.paired and args.jitter_seeds:
        parser.error("--paired compares each live table with one simulation: give --jitter-seeds without it")
    tables = [(path, *read_live(path, args.duration)) for path in args.live]
    live = [figures for _, figures, _ in tables]
    cells = cell_lengths([(path, lengths) for path, _, lengths in tables])
    seeds = sorted(set(args.seeds))  # two live runs of one seed's draws share its simulation
    sims = simulate(args.scenario, cells, seeds, args.jobs, args.jitter_seeds or (None,))
    if not args.jitter_seeds:  # one simulation per seed, in the order of the live tables
        by_seed = dict(zip(seeds, sims, strict=True))
        sims = [by_seed[seed] for seed in args.seeds]
    lines = report_paired(live, sims, args.seeds) if args.paired else report(live, sims)
    lines = [f"Cells measured for {lengths_said(cells)} on both sides.", "", *lines]
    first_line = resolve(args.scenario).read_text().partition("\n")[0]
    if first_line.startswith("# bench/sim_calibrate.py"):  # say which sitting's machine both sides ran at
        lines = [f"Calibration: {first_line.removeprefix('# ')}", "", *lines]
    Console(width=220).print("\n".join(lines), markup=False, highlight=False)
    if args.markdown is not None:
        args.markdown.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
