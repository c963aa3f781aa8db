"""Batch sizes from measured peaks and free memory: split to fit, measured before trusted, never out of memory."""

from __future__ import annotations

import pytest

from depthserve.worker.batch_budget import BatchBudget, OutOfDeviceMemory, run_within_budget

GB = 2**30
GRID = ((52, 69), (480, 640))


class FakeForward:
    """A device with `free` bytes on which a batch needs fixed + per-item bytes, recording its peak as a runner does."""

    def __init__(self, budget: BatchBudget, fixed: int, per_item: int, free: int) -> None:
        self.budget, self.fixed, self.per_item, self.free = budget, fixed, per_item, free
        self.batches: list[list[int]] = []
        self.failures = 0

    async def __call__(self, items: list[int]) -> list[int]:
        need = self.fixed + self.per_item * len(items)
        if need > self.free:
            self.failures += 1
            raise OutOfDeviceMemory(f"{need} > {self.free}")
        self.batches.append(items)
        self.budget.record(GRID, len(items), need)
        return [item * 10 for item in items]


def test_the_limit_follows_a_line_fitted_to_the_peaks_and_the_free_memory() -> None:
    budget = BatchBudget(lambda: 20 * GB, max_batch=32)
    budget.record(GRID, 1, 3 * GB)
    assert budget.limit(GRID) == 6  # one size seen: 3 GB charged per item, +10%: 20 / 3.3
    budget.record(GRID, 2, 5 * GB)
    assert budget.limit(GRID) == 8  # 1 GB fixed + 2 GB per item, +10%: (20 - 1.1) / 2.2
    assert budget.chunks(GRID, 20) == [7, 7, 6]  # even chunks within the limit


def test_peaks_measured_on_short_sequences_are_scaled_to_the_longest() -> None:
    budget = BatchBudget(lambda: 22 * GB, max_batch=32)
    budget.record(GRID, 1, GB, tokens=3589, longest_tokens=7177)  # monocular: half the tokens
    assert budget.limit(GRID) == 10  # charged as 2 GB per item: a full RGB-D batch must fit too


def test_more_free_memory_allows_more_but_never_past_max_batch() -> None:
    free = [4 * GB]
    budget = BatchBudget(lambda: free[0], max_batch=16)
    budget.record(GRID, 1, GB)
    assert budget.limit(GRID) == 3
    free[0] = 400 * GB
    assert budget.limit(GRID) == 16
    free[0] = GB // 2  # someone else took the card: still one at a time, never none
    assert budget.limit(GRID) == 1


async def test_a_grid_runs_one_item_first_then_batches_that_fit() -> None:
    budget = BatchBudget(lambda: 10 * GB, max_batch=32)
    forward = FakeForward(budget, fixed=0, per_item=GB, free=10 * GB)
    assert budget.unmeasured(GRID)
    results = await run_within_budget(budget, GRID, list(range(20)), forward)
    assert results == [item * 10 for item in range(20)]  # every item, in order
    assert [len(batch) for batch in forward.batches] == [1, 7, 6, 6]  # measured, then 19 in chunks of at most 9


async def test_a_batch_that_runs_out_of_memory_is_split_and_the_grid_capped() -> None:
    budget = BatchBudget(lambda: 100 * GB, max_batch=32)
    budget.record(GRID, 1, GB)  # the fit says 90 fit, but the device holds far less
    forward = FakeForward(budget, fixed=0, per_item=GB, free=5 * GB)
    results = await run_within_budget(budget, GRID, list(range(12)), forward)
    assert results == [item * 10 for item in range(12)]
    assert max(len(batch) for batch in forward.batches) <= 5
    assert budget.limit(GRID) <= 5
    failures = forward.failures
    assert await run_within_budget(budget, GRID, list(range(6)), forward) == [item * 10 for item in range(6)]
    assert forward.failures == failures  # the next batch of the grid starts within the cap: no second failure


async def test_an_item_that_does_not_fit_alone_gets_its_reason_and_the_others_their_outputs() -> None:
    budget = BatchBudget(lambda: 100 * GB, max_batch=32)
    forward = FakeForward(budget, fixed=0, per_item=200 * GB, free=100 * GB)
    results = await run_within_budget(budget, GRID, [1, 2], forward)
    assert all(isinstance(result, OutOfDeviceMemory) and "> " in str(result) for result in results)
    forward.per_item = 40 * GB  # two fit, three do not
    assert await run_within_budget(budget, GRID, [1, 2, 3], forward) == [10, 20, 30]


async def test_other_errors_fail_the_chunk() -> None:
    budget = BatchBudget(lambda: None, max_batch=8)

    async def broken(items: list[int]) -> list[int]:
        raise ValueError("bad item")

    with pytest.raises(ValueError, match="bad item"):
        await run_within_budget(budget, GRID, [1, 2], broken)


async def test_without_a_device_budget_the_batch_runs_whole() -> None:
    budget = BatchBudget(lambda: None, max_batch=8)
    forward = FakeForward(budget, fixed=0, per_item=1, free=10**9)
    assert not budget.unmeasured(GRID) and budget.limit(GRID) == 8
    assert await run_within_budget(budget, GRID, [1, 2, 3], forward) == [10, 20, 30]
    assert forward.batches == [[1, 2, 3]]


def test_without_a_device_budget_an_out_of_memory_still_caps_the_grid() -> None:
    budget = BatchBudget(lambda: None, max_batch=16)
    assert budget.shrink(GRID, 16) == 8 and budget.limit(GRID) == 8
    assert budget.shrink(GRID, 8) == 4 and budget.chunks(GRID, 10) == [4, 3, 3]
