"""The static source: the `--backends` list, given once and never changing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import ClassVar

from depthserve.discovery.backend_spec import parse_backend
from depthserve.discovery.source import Backends


class StaticSource:
    """Backends named on the command line or in the config file."""

    name: ClassVar[str] = "static"

    def __init__(self, specs: Iterable[str], default_auto: bool = False) -> None:
        self.backends: Backends = frozenset(parse_backend(s, default_auto, source=self.name) for s in specs)

    async def updates(self) -> AsyncIterator[Backends]:
        """Yield the list once, then wait forever (it never changes)."""
        yield self.backends
        await asyncio.Event().wait()
