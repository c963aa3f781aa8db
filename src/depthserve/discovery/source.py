"""The interface every discovery source implements: an async iterator of full backend sets."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import ClassVar, Protocol

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.discovery.errors import DiscoveryError

log = logging.getLogger("depthserve.discovery")
Backends = frozenset[BackendSpec]


class DiscoverySource(Protocol):
    """Says which backends exist: yields the whole set first, then again each time it changes."""

    name: ClassVar[str]

    def updates(self) -> AsyncIterator[Backends]:
        """Yield full sets; never an empty set because a read failed (keep the last one instead)."""
        ...


class PollingSource:
    """A source read on an interval; a failed read is logged and leaves the last set in force."""

    name: ClassVar[str] = "polling"

    def __init__(self, poll_s: float) -> None:
        self.poll_s = poll_s
        self.failures = 0  # failed reads, since start
        self.last_error: str | None = None

    async def read(self) -> Backends:
        """Read the current set once; raise DiscoveryError when it cannot be read."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release connections."""

    async def updates(self) -> AsyncIterator[Backends]:
        """Poll forever, yielding the set when it differs from the last one yielded."""
        last: Backends | None = None
        try:
            while True:
                try:
                    current = await self.read()
                except Exception as error:  # noqa: BLE001 - a source that cannot be read keeps its last set
                    self.failures += 1
                    if str(error) != self.last_error:  # log each distinct problem once, not every poll
                        unexpected = not isinstance(error, DiscoveryError)  # a bug, not an outage: keep the trace
                        log.warning(
                            "discovery %s: %s (keeping the last known backends)",
                            self.name,
                            error,
                            exc_info=unexpected,
                        )
                    self.last_error = str(error)
                else:
                    if self.last_error is not None:
                        log.info("discovery %s readable again", self.name)
                    self.last_error = None
                    if current != last:
                        last = current
                        yield current
                await asyncio.sleep(self.poll_s)
        finally:
            await self.close()
