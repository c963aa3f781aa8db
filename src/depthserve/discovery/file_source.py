"""A YAML file of backends, re-read whenever its modification time or size changes.

The file is either a list or a mapping with a `backends` list; each entry is `HOST:PORT[@WEIGHT]`
or a mapping `{address, model, version, weight, id, hardware}`. A file that fails to parse leaves
the last good set in force (and says why in the log).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, ClassVar

import yaml

from depthserve.discovery.backend_spec import parse_backend, spec_from_record
from depthserve.discovery.errors import DiscoveryError, foreign_errors
from depthserve.discovery.source import Backends, PollingSource


def parse_backends_yaml(text: str, default_auto: bool = False, source: str = "file") -> Backends:
    """Read the file's text into backend specs; ValueError (or yaml.YAMLError) with the reason."""
    data: Any = yaml.safe_load(text)
    if isinstance(data, dict):
        unknown = set(data) - {"backends"}
        if unknown:
            raise ValueError(f"unknown top-level keys {sorted(unknown)}; expected 'backends'")
        data = data.get("backends")
    if data is None:
        return frozenset()
    if not isinstance(data, list):
        raise ValueError("expected a list of backends (or a mapping with a 'backends' list)")
    specs = []
    for entry in data:
        if isinstance(entry, str):
            specs.append(parse_backend(entry, default_auto, source=source))
        elif isinstance(entry, dict):
            specs.append(spec_from_record(entry, source, default_auto))
        else:
            raise ValueError(f"backend entry {entry!r} is neither HOST:PORT nor a mapping")
    addresses = [spec.address for spec in specs]
    duplicates = sorted({a for a in addresses if addresses.count(a) > 1})
    if duplicates:
        raise ValueError(f"backends listed twice: {duplicates}")
    return frozenset(specs)


class FileSource(PollingSource):
    """Backends listed in a YAML file, reloaded on change."""

    name: ClassVar[str] = "file"

    def __init__(self, path: Path, poll_s: float = 1.0, default_auto: bool = False) -> None:
        super().__init__(poll_s)
        self.path = path
        self.default_auto = default_auto
        self._stamp: tuple[int, int] | None = None
        self._last: Backends = frozenset()

    def load(self) -> Backends:
        """Read and parse the file now; DiscoveryError naming the file when it cannot."""
        with foreign_errors(f"backends file {self.path}"):
            return parse_backends_yaml(self.path.read_text(), self.default_auto, self.name)

    async def read(self) -> Backends:
        """Give the file's backends, re-parsing only when it changed since the last good read."""
        with foreign_errors(f"backends file {self.path}"):
            info = await asyncio.to_thread(os.stat, self.path)
        stamp = (info.st_mtime_ns, info.st_size)
        if stamp == self._stamp:
            return self._last
        try:
            self._last = await asyncio.to_thread(self.load)
        except DiscoveryError:
            self._stamp = None  # try again next poll, even if the file is not touched (a partial write)
            raise
        self._stamp = stamp
        return self._last
