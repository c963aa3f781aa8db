"""What a simulation shows: a table per run (policy x load) and PNG plots of latency against load and of the
timeline around the scenario's events."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from depthserve.sim.runner import RunResult

COLUMNS = (
    "policy",
    "load",
    "offered/s",
    "ok/s",
    "goodput/s",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "failed",
    "retried",
    "util min/mean/max",
    "share per kind",
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def row(result: RunResult) -> list[str]:
    """One run's cells, in COLUMNS' order."""
    stats, span = result.stats, result.measured_s
    sketch = stats.latency
    utilisation = list(result.utilisation.values()) or [0.0]
    served = sum(result.served_by_kind.values()) or 1
    shares = " ".join(f"{kind} {count / served:.0%}" for kind, count in sorted(result.served_by_kind.items()))
    failed = f"{stats.failures / max(stats.sent, 1):.1%}" if stats.failures else "0"
    return [
        result.policy,
        f"{result.load:.0%}",
        f"{result.offered_rps:,.0f}",
        f"{stats.ok / span:,.0f}",
        f"{stats.within_slo / span:,.0f}",
        _ms(sketch.quantile(0.5)),
        _ms(sketch.quantile(0.95)),
        _ms(sketch.quantile(0.99)),
        failed,
        f"{result.retries:,}",
        f"{min(utilisation):.0%}/{statistics.fmean(utilisation):.0%}/{max(utilisation):.0%}",
        shares,
    ]


def table(results: Sequence[RunResult], title: str) -> Table:
    """The runs as a rich table, for the terminal."""
    out = Table(title=title)
    for column in COLUMNS:
        out.add_column(column, justify="left" if column in ("policy", "share per kind") else "right")
    for result in results:
        out.add_row(*row(result))
    return out


def markdown(results: Sequence[RunResult]) -> str:
    """The runs as a Markdown table, for BENCHMARKS.md."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(result)) + " |" for result in results]
    return "\n".join(lines) + "\n"


def plot_latency_against_load(results: Sequence[RunResult], path: Path, title: str) -> None:
    """p50 and p99 against offered load, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    policies = sorted({r.policy for r in results}, key=[r.policy for r in results].index)
    for policy in policies:
        runs = sorted((r for r in results if r.policy == policy), key=lambda r: r.load)
        loads = [r.load * 100 for r in runs]
        for axis, q in zip(axes, (0.5, 0.99), strict=True):
            axis.plot(loads, [r.stats.latency.quantile(q) or float("nan") for r in runs], marker="o", label=policy)
    for axis, name in zip(axes, ("p50", "p99"), strict=True):
        axis.set_xlabel("offered load, % of the fleet's capacity")
        axis.set_ylabel(f"{name} latency, ms")
        axis.set_yscale("log")
        axis.grid(True, which="both", alpha=0.3)
    axes[1].legend(fontsize=7, loc="upper left")
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_timeline(results: Sequence[RunResult], path: Path, title: str, events: Sequence[float]) -> None:
    """p99 per second and failures per second through the run, one line per policy, events marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (latency, failures) = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
    for result in results:
        seconds = sorted(result.stats.timeline)
        p99 = [result.stats.timeline[s].latency.quantile(0.99) or float("nan") for s in seconds]
        failed = [result.stats.timeline[s].failed for s in seconds]
        latency.plot(seconds, p99, label=result.policy, linewidth=1.2)
        failures.plot(seconds, failed, label=result.policy, linewidth=1.0)
    for at in events:
        for axis in (latency, failures):
            axis.axvline(at, color="grey", linestyle="--", linewidth=0.8)
    latency.set_ylabel("p99 latency, ms")
    latency.set_yscale("log")
    failures.set_ylabel("failed requests / s")
    failures.set_xlabel("simulated time, s")
    latency.legend(fontsize=7, loc="upper left")
    for axis in (latency, failures):
        axis.grid(True, alpha=0.3)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def scaling_summary(result: RunResult, burst_at: float | None) -> list[str]:
    """How the autoscaler followed the load: reaction to a burst, peak, and the GPU time it paid for."""
    log = result.scaling
    if log is None or not log.steps:
        return []
    first = log.steps[0]
    lines = [f"autoscaling: {log.added} workers added, {log.drained} drained; started at {first.serving} serving"]
    if burst_at is not None:
        asked = next((s for s in log.steps if s.at >= burst_at and s.desired > first.desired), None)
        peak = max(log.steps, key=lambda s: s.desired)
        served = next((s for s in log.steps if s.at >= burst_at and s.serving >= peak.desired), None)
        if asked is not None:
            lines.append(f"  asked for more {asked.at - burst_at:.1f} s after the burst; peak desired {peak.desired}")
        if served is not None:
            lines.append(f"  {peak.desired} serving {served.at - burst_at:.1f} s after the burst")
    idle = max(0.0, log.worker_seconds - result.busy_s)
    share = idle / log.worker_seconds if log.worker_seconds else 0.0
    lines.append(f"  GPU time {log.worker_seconds:,.0f} worker-s, of it idle {idle:,.0f} ({share:.0%})")
    return lines


def plot_scaling(result: RunResult, path: Path, title: str) -> None:
    """Serving, warming and desired workers, and the demand, through the run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    log = result.scaling
    if log is None:
        return
    times = [s.at for s in log.steps]
    figure, axis = plt.subplots(figsize=(10, 4))
    axis.plot(times, [s.serving for s in log.steps], label="serving")
    axis.plot(times, [s.serving + s.warming for s in log.steps], label="serving + warming", linestyle=":")
    axis.plot(times, [s.desired for s in log.steps], label="desired (signal)", linestyle="--")
    axis.plot(times, [s.demand for s in log.steps], label="demand at target", linewidth=0.8)
    axis.set_xlabel("simulated time, s")
    axis.set_ylabel("workers")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
