"""Peak memory of a process and its children, for tests and benchmarks that bound what a request may cost."""

from __future__ import annotations

from depthserve.testing.processes import descendants


def peak_rss_mb(pid: int) -> float:
    """The largest peak resident size (VmHWM) among a process and its descendants, MiB (granian's worker is a child)."""
    peak_kib = 0
    for member in {pid, *descendants(pid)}:
        try:
            with open(f"/proc/{member}/status") as status:
                peak_kib = max(peak_kib, next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")))
        except (OSError, StopIteration):
            continue
    return peak_kib / 1024
