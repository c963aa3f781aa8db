"""Autoscaling: `depthserve up --autoscale` under a load step, as a timeline of the scaling signal.

Synthetic workers (40 ms per request, one at a time: 25 req/s each) behind one gateway; an open-loop
Poisson load offers 10% of one worker's capacity, then 300%, then 10% again. The gateway's
signal (/v1/cluster `scaling`, the rule in depthserve.scaling) is sampled every 0.25 s. Reported:
when the desired count and the serving workers changed, how long after the step each reaction came
(signal, then workers warm and serving), how long after the load fell the pool shrank (the quiet
window plus the drain), every request's fate (200, 503 by reason, lost), and idle worker-seconds
(serving workers minus the busy ones, R/μ, summed over the run): what the quiet window costs.

    python bench/autoscale.py [--low 10] [--burst 30] [--calm 30] [--down-window 10] [--markdown out.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

from depthserve.testing.autoscale_run import AutoscaleRun, Phase, run_autoscale

SERVICE_MS = 40.0


def summary(run: AutoscaleRun, down_window_s: float) -> list[str]:
    """The run as markdown: the accounting, the reactions, then the timeline of changes."""
    stats, timeline = run.stats, run.timeline
    _, burst, calm = run.phase_starts
    top = max(s.desired for s in timeline.samples)
    asked = timeline.first(burst, lambda s: s.desired > 1)
    full = timeline.first(burst, lambda s: s.serving >= top)
    shrink = timeline.first(calm, lambda s: s.desired < top)
    back = timeline.first(calm, lambda s: s.serving == 1 and s.listed == 1)
    idle = 0.0
    for before, after in zip(timeline.samples, timeline.samples[1:], strict=False):
        busy = before.completions_per_s / run.capacity_rps
        idle += max(0.0, before.serving - busy) * (after.t - before.t)

    def after(sample: object, start: float) -> str:
        return "never" if sample is None else f"{sample.t - start:.1f} s"  # type: ignore[attr-defined]

    lines = [
        f"Load: {stats.sent} requests, {stats.ok} ok, refused {dict(stats.by_reason) or 'none'}, "
        f"lost {stats.transport_errors + stats.unclear}, mixed up {stats.mixed_up}; "
        f"p50 {stats.percentile(50):.0f} ms, p99 {stats.percentile(99):.0f} ms.",
        "",
        "| event | after the step |",
        "|---|---|",
        f"| signal asks for more workers | {after(asked, burst)} |",
        f"| {top} workers serving | {after(full, burst)} |",
        f"| signal asks for fewer (quiet window {down_window_s:.0f} s) | {after(shrink, calm)} |",
        f"| back to 1 worker, the others drained | {after(back, calm)} |",
        "",
        f"Idle worker-seconds over the run: {idle:.1f} (serving workers minus busy ones, R/μ).",
        "",
        "| t (s) | phase | serving | listed | desired | demand | waiting | completed/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    names = ["10%", "300%", "10%"]
    for sample in timeline.changes():
        phase = names[sum(sample.t >= start for start in run.phase_starts) - 1]
        lines.append(
            f"| {sample.t:.1f} | {phase} | {sample.serving} | {sample.listed} | {sample.desired} | "
            f"{sample.demand:.2f} | {sample.waiting} | {sample.completions_per_s:.1f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--low", type=float, default=10.0, help="seconds at 10%% before the step")
    parser.add_argument("--burst", type=float, default=30.0, help="seconds at 300%%")
    parser.add_argument("--calm", type=float, default=30.0, help="seconds at 10%% after it")
    parser.add_argument("--down-window", type=float, default=10.0, help="the gateway's scale_down_window_s")
    parser.add_argument("--bounds", default="1:4", help="--autoscale MIN:MAX")
    parser.add_argument("--markdown", type=Path, help="also write the result here")
    args = parser.parse_args()
    phases = [Phase(0.1, args.low), Phase(3.0, args.burst), Phase(0.1, args.calm)]
    with tempfile.TemporaryDirectory(prefix="bench-autoscale-") as folder:
        run = asyncio.run(run_autoscale(Path(folder), phases, args.bounds, SERVICE_MS, down_window_s=args.down_window))
    lines = summary(run, args.down_window)
    lines.append("")
    lines.append(f"Load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (shared).")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")


if __name__ == "__main__":
    main()
