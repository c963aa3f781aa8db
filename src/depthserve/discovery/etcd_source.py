"""Backends registered in etcd, followed by a watch: a change reaches the gateway when etcd commits it.

The source lists the prefix once, yields that set, then applies the watch's puts and deletes from
the next revision on. When etcd goes away (restart, cut link, compaction of the revision watched)
it keeps the set last yielded, reconnects with a backoff, lists again and carries on watching:
a gateway serves its last view through an etcd outage and catches up as soon as etcd is back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import ClassVar

from depthserve.discovery.backend_spec import BackendSpec, spec_from_record
from depthserve.discovery.errors import DiscoveryError
from depthserve.discovery.etcd_registry import EtcdRegistry, decode_entry
from depthserve.discovery.source import Backends, log

RETRY_MIN_S = 0.25
RETRY_MAX_S = 5.0


class EtcdSource:
    """Backends under an etcd prefix, kept current by a watch (no polling)."""

    name: ClassVar[str] = "etcd"

    def __init__(self, url: str, default_auto: bool = False) -> None:
        self.registry = EtcdRegistry(url)
        self.default_auto = default_auto
        self.failures = 0  # lost connections or failed lists, since start
        self.last_error: str | None = None
        self._entries: dict[str, BackendSpec] = {}  # key -> spec
        self._bad: set[str] = set()

    def _apply(self, key: str, value: bytes | None) -> None:
        """Put or delete one key's backend (a malformed entry is skipped, logged once)."""
        self._entries.pop(key, None)
        if value is None:
            return
        try:
            spec = spec_from_record(decode_entry(key, value), self.name, self.default_auto)
        except (DiscoveryError, ValueError) as exc:
            if str(exc) not in self._bad:
                self._bad.add(str(exc))
                log.warning("registry entry ignored: %s", exc)
            return
        self._entries[key] = spec

    def backends(self) -> Backends:
        """The current set: one spec per address (a restarted worker registered twice counts once)."""
        by_address: dict[str, BackendSpec] = {}
        for key in sorted(self._entries):
            spec = self._entries[key]
            by_address.setdefault(spec.address, spec)
        return frozenset(by_address.values())

    async def updates(self) -> AsyncIterator[Backends]:
        """List, yield, watch and yield on every change; on failure keep the last set and start over."""
        last: Backends | None = None
        delay = RETRY_MIN_S
        try:
            while True:
                try:
                    revision, entries = await self.registry.snapshot()
                    self._entries.clear()
                    for key, value in entries.items():
                        self._apply(key, value)
                    if self.last_error is not None:
                        log.info("discovery etcd readable again (%d backends)", len(self.backends()))
                        self.last_error = None
                    delay = RETRY_MIN_S
                    current = self.backends()
                    if current != last:
                        last = current
                        yield current
                    async for key, change in self.registry.changes(revision):
                        self._apply(key, change)
                        current = self.backends()
                        if current != last:
                            last = current
                            yield current
                    raise DiscoveryError(f"registry {self.registry.url} watch ended")
                except DiscoveryError as error:
                    self.failures += 1
                    if str(error) != self.last_error:
                        log.warning("discovery etcd: %s (keeping the last known backends)", error)
                    self.last_error = str(error)
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
        finally:
            with contextlib.suppress(DiscoveryError):
                await self.registry.close()
