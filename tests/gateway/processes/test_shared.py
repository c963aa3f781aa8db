"""The shared block: slots, queue lengths and rate-limit buckets hold across real processes."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest

from depthserve.gateway.processes.shared import PROBES, SLOTS, SharedState


@pytest.fixture
def block() -> Iterator[Path]:
    directory = SharedState.create(4)
    yield directory
    SharedState.remove(directory)
    assert not directory.exists()


def _spend(directory: Path, identity: str, count: int, results: multiprocessing.Queue[int]) -> None:
    state = SharedState(directory)
    results.put(sum(state.spend_token(identity, 1e-6, 50, 100.0) >= 1.0 for _ in range(count)))
    state.close()


def _take(directory: Path, count: int, limit: int, results: multiprocessing.Queue[int]) -> None:
    state = SharedState(directory)
    results.put(sum(state.try_take(limit) for _ in range(count)))
    state.close()


def run_in_processes(target: object, *args: object) -> list[int]:
    context = multiprocessing.get_context("spawn")  # fresh interpreters: nothing shared but the block
    results: multiprocessing.Queue[int] = context.Queue()
    workers = [context.Process(target=target, args=(*args, results)) for _ in range(4)]  # type: ignore[arg-type]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    return [results.get(timeout=5) for _ in workers]


def test_one_identity_gets_its_burst_once_whatever_the_processes(block: Path) -> None:
    granted = run_in_processes(_spend, block, "addr:10.0.0.1", 30)  # 4 x 30 asks of a 50-token bucket
    assert sum(granted) == 50


def test_gateway_wide_slots_are_never_overtaken(block: Path) -> None:
    taken = run_in_processes(_take, block, 20, 7)
    assert sum(taken) == 7
    state = SharedState(block)
    assert state.taken == 7
    state.give_back()
    assert state.try_take(7) and not state.try_take(7)
    state.close()


def test_process_numbers_and_queue_lengths(block: Path) -> None:
    first, second = SharedState(block), SharedState(block)
    assert [first.claim_index(), second.claim_index(), first.claim_index()] == [0, 1, 2]
    first.publish_queue(0, 3)
    second.publish_queue(1, 2)
    assert first.queued(2) == second.queued(4) == 5
    first.close()
    second.close()


def test_buckets_refill_at_their_rate_and_strangers_evict_the_stalest(block: Path) -> None:
    state = SharedState(block)
    assert state.spend_token("a", 1.0, 1, 0.0) == 1.0  # full: spent
    assert state.spend_token("a", 1.0, 1, 0.5) == pytest.approx(0.5)  # half refilled: refused
    assert state.spend_token("a", 1.0, 1, 1.5) >= 1.0  # refilled
    for n in range(SLOTS * 2):  # far more identities than buckets: still bounded, still answering
        state.spend_token(f"stranger-{n}", 1.0, 1, 2.0 + n)
    assert state.spend_token("a", 1.0, 1, 1e9) == 1.0  # forgotten, so a full bucket again (as a newcomer)
    assert PROBES <= SLOTS
    state.close()
