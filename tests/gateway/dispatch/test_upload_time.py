"""The upload timeout: a body that is in already arms no timer; one still arriving is cut off at its limit."""

from __future__ import annotations

import asyncio

import pytest

from depthserve.gateway.dispatch.forwarding import within_upload_time
from depthserve.gateway.errors import GatewayError
from depthserve.testing import virtual_time


def test_a_body_in_already_is_read_without_a_timer() -> None:
    async def main() -> tuple[str, int]:
        async def read() -> str:
            return "body"

        loop = asyncio.get_running_loop()
        timers = len(loop._timers)  # type: ignore[attr-defined]
        return await within_upload_time(read(), 30.0), len(loop._timers) - timers  # type: ignore[attr-defined]

    assert virtual_time.run(main()) == ("body", 0)


def test_a_body_still_arriving_is_read_to_its_end_under_the_timeout() -> None:
    async def main() -> tuple[str, float]:
        async def read() -> str:
            await asyncio.sleep(1.0)
            await asyncio.sleep(1.0)
            return "body"

        return await within_upload_time(read(), 30.0), asyncio.get_running_loop().time()

    assert virtual_time.run(main()) == ("body", 2.0)


def test_a_stalled_upload_is_408_at_the_upload_timeout_and_504_at_an_earlier_deadline() -> None:
    cleaned: list[float] = []

    async def read() -> str:
        try:
            await asyncio.sleep(1.0)
            await asyncio.sleep(100.0)
        finally:
            cleaned.append(asyncio.get_running_loop().time())
        return "body"

    async def main(deadline_left: float | None) -> GatewayError:
        with pytest.raises(GatewayError) as caught:
            await within_upload_time(read(), 5.0, deadline_left, 3.0)
        return caught.value

    timed_out = virtual_time.run(main(None))
    assert (timed_out.status, timed_out.reason, cleaned) == (408, "upload_timeout", [5.0])
    late = virtual_time.run(main(3.0))
    assert (late.status, late.reason, cleaned[-1]) == (504, "deadline", 3.0)


def test_an_upload_cancelled_with_its_request_is_cancelled_where_it_waits() -> None:
    async def main() -> list[str]:
        seen: list[str] = []

        async def read() -> str:
            await asyncio.sleep(1.0)
            try:
                await asyncio.sleep(10.0)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            return "body"

        task = asyncio.ensure_future(within_upload_time(read(), 30.0))
        await asyncio.sleep(2.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return seen

    assert virtual_time.run(main()) == ["cancelled"]


def test_an_error_raised_before_the_body_suspends_is_raised_as_it_is() -> None:
    async def read() -> str:
        raise GatewayError(429, "upload_quota", "too much")

    async def main() -> None:
        await within_upload_time(read(), 30.0)

    with pytest.raises(GatewayError, match="too much"):
        virtual_time.run(main())
