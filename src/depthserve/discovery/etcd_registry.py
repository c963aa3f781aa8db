"""An etcd registry: each worker puts `PREFIX/ID` under a lease it keeps alive; gateways watch the prefix.

A worker's entry is the same JSON as in the Redis registry (`{id, address, model, version, weight,
hardware}`), attached to a lease of `registry_ttl_s`: a worker that dies stops its keep-alives and
etcd deletes the key when the lease expires; a draining worker deletes its key first, then revokes
the lease. Talks to etcd's gRPC API through aetcd (a maintained asyncio client that works with the
project's pinned grpcio and protobuf); every aetcd error leaves this module as DiscoveryError.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aetcd

from depthserve.discovery.errors import DiscoveryError, foreign_errors

DEFAULT_PREFIX = "/depthserve/workers/"
DEFAULT_PORT = 2379
TIMEOUT_S = 2  # one etcd call; aetcd takes whole seconds
CANCEL_TIMEOUT_S = 1.0
# Pings find a silently dead etcd (a cut link, a paused host) instead of waiting on the watch forever;
# 10 s stays above etcd's default --grpc-keepalive-min-time (5 s), under which it refuses pings.
CHANNEL_OPTIONS = {
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.http2.max_pings_without_data": 0,
    "grpc.max_reconnect_backoff_ms": 1_000,
}


@dataclass(frozen=True)
class EtcdTarget:
    """Where the registry lives: one etcd endpoint and the key prefix of this cluster's workers."""

    host: str
    port: int
    prefix: str  # always ends with "/"

    def key(self, worker_id: str) -> str:
        """The key of one worker's entry."""
        return f"{self.prefix}{worker_id}"


def parse_etcd_url(url: str) -> EtcdTarget:
    """Read `etcd://HOST[:PORT][/PREFIX]`; ValueError with the reason."""
    parts = urlsplit(url)
    if parts.scheme != "etcd" or not parts.hostname:
        raise ValueError(f"etcd URL {url!r} is not etcd://HOST[:PORT][/PREFIX]")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(f"etcd URL {url!r} has a bad port") from None
    if parts.query or parts.fragment:
        raise ValueError(f"etcd URL {url!r}: no query or fragment expected")
    path = parts.path.strip("/")
    prefix = f"/{path}/" if path else DEFAULT_PREFIX
    return EtcdTarget(parts.hostname, port, prefix)


class EtcdRegistry:
    """Reads, writes and watches registry entries under one prefix."""

    def __init__(self, url: str, timeout_s: int = TIMEOUT_S) -> None:
        self.url = url
        self.target = parse_etcd_url(url)
        self.host, self.port = self.target.host, self.target.port
        self._client = aetcd.Client(self.host, self.port, timeout=timeout_s, options=dict(CHANNEL_OPTIONS))
        self._lease: Any = None  # aetcd.Lease of this process's entry, once granted

    async def register(self, entry: Mapping[str, Any], ttl_s: float) -> None:
        """Put the entry under a fresh lease, or keep the existing lease alive (re-putting if it expired)."""
        with foreign_errors(f"registry {self.url}"):
            if self._lease is not None:
                reply = await self._lease.refresh()
                if reply is not None and reply.TTL > 0:
                    return
                self._lease = None  # expired while we could not reach etcd: start over
            lease = await self._client.lease(max(1, math.ceil(ttl_s)))
            key = self.target.key(str(entry["id"])).encode()
            await self._client.put(key, json.dumps(dict(entry)).encode(), lease=lease)
            self._lease = lease

    async def deregister(self, worker_id: str) -> None:
        """Delete the entry at once (a draining worker), then give back its lease."""
        with foreign_errors(f"registry {self.url}"):
            await self._client.delete(self.target.key(worker_id).encode())
            lease, self._lease = self._lease, None
            if lease is not None:
                await lease.revoke()

    async def snapshot(self) -> tuple[int, dict[str, bytes]]:
        """Every entry under the prefix, by key, and the store's revision they were read at."""
        with foreign_errors(f"registry {self.url}"):
            found = await self._client.get_prefix(self.target.prefix.encode())
            return found.header.revision, {kv.key.decode(): kv.value for kv in found}

    async def changes(self, after_revision: int) -> AsyncIterator[tuple[str, bytes | None]]:
        """Yield (key, value) for each put and (key, None) for each delete after a revision, as they happen."""
        with foreign_errors(f"registry {self.url} watch"):
            watch = await self._client.watch_prefix(self.target.prefix.encode(), start_revision=after_revision + 1)
            try:
                async for event in watch:
                    key = event.kv.key.decode()
                    yield key, (event.kv.value if event.kind == aetcd.EventKind.PUT else None)
            finally:
                # A watch on a dead connection cannot be cancelled: nothing to undo, and never wait on it long.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(CANCEL_TIMEOUT_S):
                        await watch.cancel()

    async def close(self) -> None:
        """Close the connection."""
        with foreign_errors(f"registry {self.url}"):
            await self._client.close()


def decode_entry(key: str, value: bytes) -> dict[str, Any]:
    """One entry's JSON; DiscoveryError naming the key when it is not a JSON object."""
    try:
        entry = json.loads(value)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise DiscoveryError(f"registry entry {key} is not JSON") from None
    if not isinstance(entry, dict):
        raise DiscoveryError(f"registry entry {key} is not a JSON object")
    return entry
