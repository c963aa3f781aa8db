"""The simulated worker: batches by token grid, a + b*n service times at its speed, a bounded queue."""

from __future__ import annotations

import asyncio
import random

import pytest

from depthserve.protocol.load_report import LoadReport
from depthserve.sim.worker_model import GpuKind, Job, ServiceModel, SimWorker
from depthserve.testing import virtual_time
from depthserve.worker.device_queue import DeviceQueue


def worker(**fields: object) -> SimWorker:
    service = ServiceModel(fixed_s=0.010, per_cost_s=0.005, sigma=0.0, network_s=0.0)
    return SimWorker("w:1", GpuKind("A100", speed=2.0), service, **fields)  # type: ignore[arg-type]


def test_a_batch_costs_fixed_plus_per_cost_at_the_workers_speed_and_groups_one_grid() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        sim = worker(max_batch=4)
        done: list[tuple[str, float]] = []
        for name, grid in (("a", 9), ("b", 9), ("c", 0), ("d", 9)):
            future = loop.create_future()
            future.add_done_callback(lambda _, n=name: done.append((n, loop.time())))
            assert sim.submit(Job(1.0, grid, future, loop.time()), loop)
        await asyncio.sleep(1.0)
        return done

    done = virtual_time.run(main())
    # a runs alone (the queue was empty), then b and d share grid 9; c's grid waits its turn.
    assert [name for name, _ in done] == ["a", "b", "d", "c"]
    times = dict(done)
    assert times["a"] == pytest.approx((0.010 + 0.005) / 2.0)
    assert times["d"] - times["a"] == pytest.approx((0.010 + 0.005 * 2) / 2.0)


def test_a_full_queue_refuses_and_a_report_says_how_full_it_is() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        sim = worker(max_batch=1, queue_limit=2)
        accepted = [sim.submit(Job(1.0, 0, loop.create_future(), 0.0), loop) for _ in range(4)]
        assert accepted == [True, True, True, False]  # one running, two queued, the fourth refused
        report = sim.report(loop.time())
        assert (report.queue, report.queue_limit, report.running) == (2, 2, 1)

    virtual_time.run(main())


def test_a_hung_worker_never_answers_and_its_noise_is_seeded() -> None:
    async def main() -> bool:
        loop = asyncio.get_running_loop()
        sim = worker(hung=True)
        future = loop.create_future()
        sim.submit(Job(1.0, 0, future, 0.0), loop)
        await asyncio.sleep(60.0)
        return future.done()

    assert virtual_time.run(main()) is False
    noisy = ServiceModel(0.01, 0.0, sigma=1.0)
    first = [noisy.time(1.0, 1.0, random.Random(3)) for _ in range(5)]
    assert first == [noisy.time(1.0, 1.0, random.Random(3)) for _ in range(5)]


def test_a_high_priority_job_runs_next_as_at_a_real_worker() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        sim = worker(max_batch=1)
        done: list[str] = []
        for name, high in (("running", False), ("queued", False), ("express1", True), ("express2", True)):
            future = loop.create_future()
            future.add_done_callback(lambda _, n=name: done.append(n))
            assert sim.submit(Job(1.0, 9, future, loop.time(), high), loop)
        await asyncio.sleep(1.0)
        return done

    assert virtual_time.run(main()) == ["running", "express1", "express2", "queued"]


def test_the_workers_own_time_per_batch_is_not_scaled_by_its_speed() -> None:
    service = ServiceModel(fixed_s=0.020, per_cost_s=0.0, sigma=0.0, network_s=0.0, overhead_s=0.001)
    rng = random.Random(0)
    assert service.time(1.0, 1.0, rng) == pytest.approx(0.021)
    assert service.time(1.0, 0.25, rng) == pytest.approx(0.081)  # the device is 4x slower, the host is not


def test_a_reply_reports_the_next_batch_already_running_as_a_real_worker_does() -> None:
    """A real worker's batcher starts its next batch before it answers the last one's callers, so a busy worker's
    reply shows work running and its activations in memory; a report taken first read every busy worker as idle."""

    async def main() -> list[LoadReport]:
        loop = asyncio.get_running_loop()
        sim = worker(max_batch=1)
        futures = [loop.create_future() for _ in range(3)]
        for future in futures:
            assert sim.submit(Job(1.0, 0, future, loop.time()), loop)
        return [await future for future in futures]  # type: ignore[misc]

    first, second, last = virtual_time.run(main())
    assert [(r.queue, r.running) for r in (first, second, last)] == [(1, 1), (0, 1), (0, 0)]
    assert first.mem_total and first.mem_used / first.mem_total == pytest.approx(0.25)  # model plus one in flight
    assert last.mem_used / last.mem_total == pytest.approx(0.20)  # the model alone: nothing left to run


def test_utilisation_reads_as_the_live_workers_device_queue_does() -> None:
    """A report's utilisation is the device's busy share of the last 5 s, own time left out, as the live worker's
    DeviceQueue measures it on the same timeline; score ranks by it, and a 2 s window counting the own time made
    simulated score read 20% slower than live at 95% load (2026-12-07)."""
    service = ServiceModel(fixed_s=0.8, per_cost_s=0.0, sigma=0.0, network_s=0.0, overhead_s=0.2)
    sim = SimWorker("w:1", GpuKind("A100"), service, max_batch=1)
    clock = [0.0]
    live = DeviceQueue(limit=8, clock=lambda: clock[0])
    jobs = (0.0, 1.1, 2.2, 6.0, 7.1)  # the device held 0.8 s from each, then the worker's own 0.2 s
    events = sorted([(at, "job") for at in jobs] + [(at + 0.8, "release") for at in jobs])
    events = sorted(events + [(at, "read") for at in (0.5, 2.5, 3.05, 5.5, 6.4, 7.5, 10.0, 12.5)])

    async def main() -> list[tuple[float, float, float]]:
        loop = asyncio.get_running_loop()
        readings = []
        for at, what in events:
            await asyncio.sleep(at - loop.time())
            clock[0] = at
            if what == "job":
                assert sim.submit(Job(1.0, 0, loop.create_future(), at), loop)
                await live.acquire()
            elif what == "release":
                live.release()
            else:
                readings.append((at, sim.utilisation(at), live.utilisation()))
        return readings

    readings = virtual_time.run(main())
    for at, simulated, measured in readings:
        assert simulated == pytest.approx(measured, abs=1e-6), f"at {at} s"
    assert [round(simulated, 3) for _, simulated, _ in readings] == [0.1, 0.38, 0.48, 0.38, 0.34, 0.34, 0.32, 0.08]
