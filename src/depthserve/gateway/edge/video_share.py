"""The share of the gateway videos may take: videos at once, and frames in flight across all videos.

A video's frames are many small requests arriving as fast as workers answer them. Left alone they
would hold every admission slot a model has and image requests would queue behind them, so: at most
`video_max_active` videos run at once (503 `videos_full` beyond), all their frames together hold at
most `video_share` of the model's admission capacity (its workers' concurrency from their load
reports, else `max_in_flight`), and each frame asks admission at low priority, so an image waiting
for a slot always gets the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

from depthserve.gateway.edge.video_disk import VideoDisk
from depthserve.gateway.errors import GatewayError
from depthserve.settings import GatewaySettings


class VideoShare:
    """Counts videos running and their frames in flight per model, against the share videos may take."""

    def __init__(self, settings: GatewaySettings, capacity: Callable[[str], int | None] | None = None) -> None:
        self.max_active = settings.video_max_active
        self.share = settings.video_share
        self._max_in_flight = settings.max_in_flight
        self._capacity = capacity
        self.active = 0
        self.frames: Counter[str] = Counter()  # frames holding (or asking for) an admission slot, per model
        self.refused = 0
        self._freed = asyncio.Condition()
        self._place_freed = asyncio.Event()
        self.disk = VideoDisk(int(settings.video_max_disk_mb * 1024 * 1024), settings.video_spool_dir)

    def describe(self) -> dict[str, object]:
        """Videos running, their frames in flight per model, videos refused, their uploads' disk, for /v1/cluster."""
        described = {"active": self.active, "frames_in_flight": dict(self.frames), "refused": self.refused}
        return described | self.disk.describe()

    @contextmanager
    def video(self) -> Iterator[None]:
        """Hold one of the video places for the body of `with`; 503 videos_full when none is free."""
        if self.active >= self.max_active:
            self.refused += 1
            raise GatewayError(
                503,
                "videos_full",
                f"the gateway is working on {self.max_active} videos, its limit (video_max_active)",
                retry_after=5.0,
            )
        self.active += 1
        try:
            yield
        finally:
            self.active -= 1
            self._place_freed.set()

    @asynccontextmanager
    async def queued_video(self) -> AsyncIterator[None]:
        """Wait for a video place (a video job queues for one, where a request is refused), hold it for the body."""
        while self.active >= self.max_active:
            self._place_freed.clear()
            await self._place_freed.wait()
        with self.video():
            yield

    def frame_cap(self, model: str) -> int:
        """Frames of all videos that may be in flight for `model` now."""
        capacity = self._capacity(model) if self._capacity is not None else None
        return max(1, math.floor((capacity or self._max_in_flight) * self.share))

    @asynccontextmanager
    async def frame(self, model: str) -> AsyncIterator[None]:
        """Wait (re-checking as frames finish, and at least every second) for a frame place of `model`."""
        async with self._freed:
            while self.frames[model] >= self.frame_cap(model):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):  # the capacity may grow meanwhile
                        await self._freed.wait()
            self.frames[model] += 1
        try:
            yield
        finally:
            self.frames[model] -= 1
            if not self.frames[model]:
                del self.frames[model]
            async with self._freed:
                self._freed.notify()
