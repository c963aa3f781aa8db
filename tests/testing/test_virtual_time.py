"""The virtual-time loop: sleeps pass at once and in order, the clock never goes back, a deadlock is named."""

from __future__ import annotations

import asyncio

import pytest

from depthserve.testing import virtual_time


def test_a_day_of_sleeps_passes_at_once_in_order() -> None:
    async def main() -> list[tuple[float, str]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[float, str]] = []

        async def sleeper(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            seen.append((loop.time(), name))

        await asyncio.gather(sleeper("late", 86_400.0), sleeper("early", 1.5), sleeper("same", 1.5))
        return seen

    assert virtual_time.run(main()) == [(1.5, "early"), (1.5, "same"), (86_400.0, "late")]


def test_timeouts_fire_at_their_moment_and_the_clock_never_goes_back() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        times = []
        for delay in (0.25, 0.0, 3.0, 0.001):
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(delay):
                    await asyncio.Event().wait()
            times.append(loop.time())
        return times

    times = virtual_time.run(main(), start=100.0)
    assert times == sorted(times) and times[-1] == pytest.approx(100.0 + 3.251)


def test_waiting_on_nothing_is_a_deadlock_not_a_hang() -> None:
    async def main() -> None:
        await asyncio.Event().wait()

    with pytest.raises(virtual_time.Deadlock):
        virtual_time.run(main())
