"""Run one batch through the runner so that a bad request fails alone, never its batch-mates."""

from __future__ import annotations

import logging

from depthserve.worker.runners.base import Outputs, Prepared, Runner

log = logging.getLogger("depthserve.worker")


async def compute_batch(runner: Runner, batch: list[Prepared]) -> tuple[list[Outputs | Exception], bool]:
    """Give each item's outputs or its own error, and whether the batch ran whole (its time is a fair sample).

    When the runner fails the whole batch (one item the model rejects, an out-of-memory on the batch), the
    items are run again one at a time: a bad item gets its error, the others their outputs. This costs up to
    n extra single runs, only on a failed batch.
    """
    try:
        results = await runner.compute_batch(batch)
    except Exception as exc:  # noqa: BLE001 - one bad item must not fail its batch-mates
        if len(batch) == 1:
            return [exc], False
        log.warning("batch of %d failed (%s: %s); running its items one by one", len(batch), type(exc).__name__, exc)
        return [await _compute_one(runner, prepared) for prepared in batch], False
    if len(results) != len(batch):
        raise RuntimeError(f"runner gave {len(results)} results for a batch of {len(batch)}")
    return results, True


async def _compute_one(runner: Runner, prepared: Prepared) -> Outputs | Exception:
    try:
        (result,) = await runner.compute_batch([prepared])
    except Exception as exc:  # noqa: BLE001 - this item's own error, returned to its caller
        return exc
    return result
