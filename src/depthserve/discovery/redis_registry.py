"""A Redis registry: each worker keeps a key `depthserve:registry:CLUSTER:ID` alive; gateways list the keys.

A worker's entry is JSON `{id, address, model, version, weight, hardware}` set with a TTL that its
heartbeat renews; it deletes the key when it drains, and a worker that dies just stops renewing,
so its key expires. Gateways scan the keys every poll (simple, and any number of gateways can
watch one registry without coordination).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.asyncio as aioredis

from depthserve.discovery.backend_spec import BackendSpec, spec_from_record
from depthserve.discovery.errors import DiscoveryError, foreign_errors
from depthserve.discovery.source import Backends, PollingSource, log

KEY_PREFIX = "depthserve:registry:"
DEFAULT_CLUSTER = "default"
TIMEOUT_S = 2.0  # a registry that does not answer within this is treated as unreachable

T = TypeVar("T")


def split_url(url: str) -> tuple[str, str]:
    """Split `redis://HOST:PORT[/DB][?cluster=NAME]` into the client URL and the cluster name."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss") or not parts.hostname:
        raise ValueError(f"registry URL {url!r} is not redis://HOST[:PORT][/DB]")
    query = dict(parse_qsl(parts.query))
    cluster = query.pop("cluster", DEFAULT_CLUSTER)
    if not cluster or any(c in cluster for c in "*?[]: "):
        raise ValueError(f"registry URL {url!r}: cluster name {cluster!r} must be plain text")
    return urlunsplit(parts._replace(query=urlencode(query))), cluster


class RedisRegistry:
    """Reads and writes registry entries; every Redis error leaves here as DiscoveryError."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        client_url, self.cluster = split_url(url)
        self.url = url
        self.host = urlsplit(client_url).hostname or ""
        self.port = urlsplit(client_url).port or 6379
        self._client = aioredis.from_url(
            client_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, decode_responses=True
        )
        self._timeout_s = timeout_s
        self._commands: set[asyncio.Future[Any]] = set()  # running, some perhaps for a caller that was cancelled

    async def _call(self, command: Awaitable[T]) -> T:
        """Run a Redis command in a task of its own, so that cancelling the caller never lands inside redis-py.

        redis-py 8.2 swallows a cancellation that arrives mid-command: a heartbeat or a poll loop cancelled
        there went on forever, and the worker's stop or the gateway's shutdown that awaited it hung. Shielded,
        the caller is cancelled at once and the command ends on its own within the socket timeout.
        """
        task = asyncio.ensure_future(command)
        self._commands.add(task)
        task.add_done_callback(_forget(self._commands))
        return await asyncio.shield(task)

    async def _settled(self) -> None:
        """Let commands left by cancelled callers end first, so a delete is not overtaken by an earlier write."""
        if self._commands:
            await asyncio.wait(set(self._commands), timeout=2 * self._timeout_s)

    def key(self, worker_id: str) -> str:
        """The key of one worker's entry."""
        return f"{KEY_PREFIX}{self.cluster}:{worker_id}"

    async def register(self, entry: Mapping[str, Any], ttl_s: float) -> None:
        """Write (or renew) an entry that expires after `ttl_s` unless written again."""
        with foreign_errors(f"registry {self.url}"):
            value = json.dumps(dict(entry))
            await self._call(self._client.set(self.key(str(entry["id"])), value, px=max(1, int(ttl_s * 1000))))

    async def deregister(self, worker_id: str) -> None:
        """Delete an entry at once (a draining worker)."""
        await self._settled()
        with foreign_errors(f"registry {self.url}"):
            await self._call(self._client.delete(self.key(worker_id)))

    async def entries(self) -> list[dict[str, Any]]:
        """List the live entries; malformed ones are skipped with a log line."""
        with foreign_errors(f"registry {self.url}"):
            keys, values = await self._call(self._read())
        found = []
        for key, value in zip(keys, values, strict=True):
            if value is None:
                continue  # expired between the scan and the read
            try:
                entry = json.loads(value)
            except json.JSONDecodeError:
                log.warning("registry entry %s is not JSON; ignored", key)
                continue
            if isinstance(entry, dict):
                found.append(entry)
        return found

    async def _read(self) -> tuple[list[Any], list[Any]]:
        """Scan this cluster's keys and read their values."""
        keys = [key async for key in self._client.scan_iter(match=f"{KEY_PREFIX}{self.cluster}:*", count=500)]
        return keys, (await self._client.mget(keys) if keys else [])

    async def close(self) -> None:
        """Close the connection pool once the commands still running have ended."""
        await self._settled()
        with foreign_errors(f"registry {self.url}"):
            await self._client.aclose()


def _forget(running: set[asyncio.Future[Any]]) -> Callable[[asyncio.Future[Any]], None]:
    """A done-callback that drops a command from `running` and reads its outcome, so none is logged as lost."""

    def ended(task: asyncio.Future[Any]) -> None:
        running.discard(task)
        if not task.cancelled():
            task.exception()

    return ended


class RedisSource(PollingSource):
    """Backends registered in Redis, listed every poll."""

    name: ClassVar[str] = "redis"

    def __init__(self, url: str, poll_s: float = 1.0, default_auto: bool = False) -> None:
        super().__init__(poll_s)
        self.registry = RedisRegistry(url)
        self.default_auto = default_auto
        self._bad: set[str] = set()

    async def read(self) -> Backends:
        """Give the registered backends (an entry with a bad field is skipped, once logged)."""
        specs: dict[str, BackendSpec] = {}
        for entry in await self.registry.entries():
            try:
                spec = spec_from_record(entry, self.name, self.default_auto)
            except ValueError as exc:
                if str(exc) not in self._bad:
                    self._bad.add(str(exc))
                    log.warning("registry entry ignored: %s", exc)
                continue
            specs.setdefault(spec.address, spec)  # one address registered twice (a restart): keep one
        return frozenset(specs.values())

    async def close(self) -> None:
        """Close the registry connection, ignoring a registry already gone."""
        with contextlib.suppress(DiscoveryError):
            await self.registry.close()
