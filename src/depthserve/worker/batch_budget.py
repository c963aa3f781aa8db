"""How many items of one token grid fit a forward pass, from measured activation peaks and the device's free memory.

Nothing is guessed: a grid never seen runs its first batch one item at a time, and every forward reports
its peak (bytes allocated above what was held before it). Peaks are fitted as fixed + per-item bytes and
scaled to the longest token sequence the grid can have (every depth token kept), so a measurement made on
monocular requests still bounds a batch of full RGB-D ones. A batch larger than the fit allows is split;
a forward that still runs out of memory lowers the grid's limit and is split again, down to one item.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")
MARGIN = 1.1  # a fitted peak is inflated by this before it is compared with free memory


class OutOfDeviceMemory(Exception):
    """A forward pass did not fit the device's memory (the runner's translation of the framework's error)."""


@dataclass
class GridPeaks:
    """The peaks measured for one grid: items in the batch -> most bytes seen, scaled to the longest sequence."""

    peaks: dict[int, int] = field(default_factory=dict)
    cap: int | None = None  # most items allowed after an out-of-memory; None = no cap

    def fit(self) -> tuple[float, float]:
        """Give (fixed, per-item) bytes of a line at or above every peak measured (fixed 0 from one size alone)."""
        sizes = sorted(self.peaks)
        small, large = sizes[0], sizes[-1]
        fixed = 0.0
        if small != large:
            slope = (self.peaks[large] - self.peaks[small]) / (large - small)
            fixed = max(0.0, self.peaks[small] - small * slope)
        per_item = max((peak - fixed) / items for items, peak in self.peaks.items())
        return fixed, max(per_item, 0.0)


class BatchBudget:
    """Decides batch sizes per grid key from measured peaks and `available()` bytes (None: no limit, a CPU)."""

    def __init__(self, available: Callable[[], int | None], max_batch: int) -> None:
        self._available = available
        self.max_batch = max_batch
        self._grids: dict[Hashable, GridPeaks] = {}

    def record(self, key: Hashable, items: int, peak_bytes: int, tokens: int = 1, longest_tokens: int = 1) -> None:
        """Note a forward's activation peak, made with sequences of `tokens` where a grid allows `longest_tokens`."""
        scaled = int(peak_bytes * max(1.0, longest_tokens / max(tokens, 1)))
        grid = self._grids.setdefault(key, GridPeaks())
        grid.peaks[items] = max(grid.peaks.get(items, 0), scaled)

    def unmeasured(self, key: Hashable) -> bool:
        """Whether `key` must first run one item to be measured (never on a device without a budget)."""
        grid = self._grids.get(key)
        return (grid is None or not grid.peaks) and self._available() is not None

    def limit(self, key: Hashable) -> int:
        """Give the most items of `key` one forward may hold now (1 for a grid not yet measured)."""
        grid = self._grids.get(key)
        cap = self.max_batch if grid is None or grid.cap is None else grid.cap
        available = self._available()
        if available is None:
            return max(1, min(self.max_batch, cap))  # no measured budget: only an out-of-memory lowers it
        if grid is None or not grid.peaks:
            return 1
        fixed, per_item = grid.fit()
        fits = int((available - fixed * MARGIN) // max(per_item * MARGIN, 1.0))
        return max(1, min(self.max_batch, fits, cap))

    def shrink(self, key: Hashable, failed_items: int) -> int:
        """Cap `key` below a batch size that ran out of memory; give the new cap."""
        grid = self._grids.setdefault(key, GridPeaks())
        grid.cap = max(1, min(failed_items // 2, grid.cap or failed_items))
        return grid.cap

    def chunks(self, key: Hashable, items: int) -> list[int]:
        """Split `items` into batch sizes within the limit, as even as possible (10 at limit 4: 4, 3, 3)."""
        limit = self.limit(key)
        count = -(-items // limit)
        base, extra = divmod(items, count)
        return [base + 1] * extra + [base] * (count - extra)


async def run_within_budget(
    budget: BatchBudget, key: Hashable, items: Sequence[T], run: Callable[[list[T]], Awaitable[list[R]]]
) -> list[R | Exception]:
    """Run `items` in chunks the budget allows (concurrently, so a pipeline can overlap them); results in order.

    A chunk that raises OutOfDeviceMemory shrinks the grid's cap and is run again in smaller chunks; an item
    that does not fit alone gets that error as its result, the others their outputs. Any other error of a
    chunk is raised (the batcher then retries its items one by one). A grid never measured runs one item first.
    """
    if len(items) > 1 and budget.unmeasured(key):
        first = await run_within_budget(budget, key, items[:1], run)
        rest = await run_within_budget(budget, key, items[1:], run)
        return first + rest
    sizes = budget.chunks(key, len(items))
    bounds = [sum(sizes[:index]) for index in range(len(sizes) + 1)]
    parts = [list(items[bounds[i] : bounds[i + 1]]) for i in range(len(sizes))]
    results = await asyncio.gather(*(run(part) for part in parts), return_exceptions=True)
    out: list[R | Exception] = []
    for part, result in zip(parts, results, strict=True):
        if isinstance(result, OutOfDeviceMemory):
            if len(part) == 1:
                out.append(result)
                continue
            budget.shrink(key, len(part))
            retried = await run_within_budget(budget, key, part, run)
            out.extend(retried)
        elif isinstance(result, BaseException):
            raise result
        else:
            out += result
    return out
