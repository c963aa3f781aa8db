"""Several sources as one: the union of their latest sets, re-published whenever any of them changes.

A source that has not reported yet contributes nothing; when two sources name one address, the
earlier source's entry wins (so `--backends` tags beat a registry's).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import ClassVar

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.discovery.source import Backends, DiscoverySource

log = logging.getLogger("depthserve.discovery")


def merge(sets: Sequence[Backends | None]) -> Backends:
    """Union by address, earlier sets first."""
    merged: dict[str, BackendSpec] = {}
    for specs in sets:
        for spec in sorted(specs or (), key=lambda s: s.address):
            merged.setdefault(spec.address, spec)
    return frozenset(merged.values())


class CombinedSource:
    """The union of several sources."""

    name: ClassVar[str] = "combined"

    def __init__(self, sources: Sequence[DiscoverySource]) -> None:
        self.sources = list(sources)

    async def updates(self) -> AsyncIterator[Backends]:
        """Yield the merged set each time it changes; one task per source feeds a queue."""
        latest: list[Backends | None] = [None] * len(self.sources)
        queue: asyncio.Queue[tuple[int, Backends]] = asyncio.Queue()

        async def pump(index: int, source: DiscoverySource) -> None:
            try:
                async for specs in source.updates():
                    await queue.put((index, specs))
            except Exception:  # noqa: BLE001 - one broken source must not freeze the others; its last set stays
                log.exception("discovery %s stopped unexpectedly; keeping its last backends", source.name)

        tasks = [asyncio.create_task(pump(i, s), name=f"discovery {s.name}") for i, s in enumerate(self.sources)]
        last: Backends | None = None
        try:
            while True:
                index, specs = await queue.get()
                latest[index] = specs
                merged = merge(latest)
                if merged != last:
                    last = merged
                    yield merged
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)  # never trade our cancellation for their error
