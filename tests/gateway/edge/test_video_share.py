"""VideoShare's frame places: a frame waits for one and takes it as one frees, but never once its video is cancelled."""

from __future__ import annotations

import asyncio

from depthserve.gateway.edge.video_share import VideoShare
from depthserve.settings import GatewaySettings


async def test_a_frame_cancelled_as_a_place_frees_never_takes_it() -> None:
    share = VideoShare(GatewaySettings(max_in_flight=1, video_share=1.0), capacity=lambda model: 1)
    entered: list[str] = []

    async def frame(name: str) -> None:
        async with share.frame("m"):
            entered.append(name)
            await asyncio.sleep(30)

    first = asyncio.ensure_future(frame("first"))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(frame("second"))  # waits: the one place is taken
    for _ in range(3):
        await asyncio.sleep(0)
    assert entered == ["first"] and share.frames["m"] == 1
    first.cancel()  # its place frees and wakes the second frame...
    await asyncio.sleep(0)
    second.cancel()  # ...whose video is cancelled before it has entered
    outcomes = await asyncio.gather(first, second, return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [asyncio.CancelledError] * 2
    assert entered == ["first"], "a cancelled frame took a place and went on to a worker"
    assert share.frames["m"] == 0


async def test_a_frame_waits_for_a_place_and_takes_it_when_one_frees() -> None:
    share = VideoShare(GatewaySettings(max_in_flight=1, video_share=1.0), capacity=lambda model: 1)
    holding = share.frame("m")
    await holding.__aenter__()
    waiting = asyncio.ensure_future(share.frame("m").__aenter__())
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await holding.__aexit__(None, None, None)
    async with asyncio.timeout(2):
        await waiting
    assert share.frames["m"] == 1
