"""A worker's side of the registry: join after warm-up, renew by heartbeat, leave first when draining.

Only registries (Redis: a key with a TTL; etcd: a key under a lease) are written by the worker; file
and DNS sources are kept by whoever runs the cluster (an operator, Kubernetes), so with those the
worker has nothing to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from depthserve.discovery.errors import DiscoveryError
from depthserve.discovery.etcd_registry import EtcdRegistry
from depthserve.discovery.redis_registry import RedisRegistry, split_url
from depthserve.settings import WorkerSettings

log = logging.getLogger("depthserve.worker")
WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def address_facing(host: str, port: int) -> str:
    """The local IP this machine uses to reach host:port: the one other machines on that path can dial."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))  # UDP: picks a route and a source address, sends nothing
        return str(probe.getsockname()[0])


def advertised_address(settings: WorkerSettings, port: int, registry: tuple[str, int] | None = None) -> str:
    """The HOST:PORT gateways should dial: `--advertise`, else the bound host, else the address facing the registry."""
    given = settings.advertise
    if given:
        if _is_ipv6(given):
            return f"[{given}]:{port}"  # a bare IPv6 literal: its colons are not a port
        host, sep, given_port = given.rpartition(":")
        if sep and given_port.isdigit() and not given.endswith("]"):
            return given
        return f"{given}:{port}"
    host = settings.host
    if host in WILDCARDS:
        if registry is None:
            raise ValueError("binding every address: give --advertise HOST so other machines know where to dial")
        host = address_facing(*registry)
    if _is_ipv6(host):
        host = f"[{host}]"
    return f"{host}:{port}"


def _is_ipv6(host: str) -> bool:
    """Whether `host` is an unbracketed IPv6 literal."""
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def hardware_summary(settings: WorkerSettings, memory_bytes: int) -> str:
    """A line saying what the worker runs on, for operators reading /v1/cluster."""
    return f"{settings.model} on {settings.device}, {os.cpu_count()} cpus, {memory_bytes / 2**30:.0f} GiB"


def worker_entry(settings: WorkerSettings, address: str, hardware: str = "") -> dict[str, Any]:
    """The registry entry `{id, address, model, version, weight, hardware}` of this worker."""
    return {
        "id": f"{socket.gethostname()}-{os.getpid()}-{address.rpartition(':')[2]}",
        "address": address,
        "model": settings.name,
        "version": settings.version,
        "weight": settings.weight if settings.weight is not None else "auto",
        "hardware": hardware,
    }


class Registry(Protocol):
    """What a worker needs of a registry; every failure is a DiscoveryError."""

    url: str
    host: str
    port: int

    async def register(self, entry: Mapping[str, Any], ttl_s: float) -> None:
        """Write the entry, or renew it, so that it lives `ttl_s` more."""
        ...

    async def deregister(self, worker_id: str) -> None:
        """Delete the entry at once."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...


def registry_for(url: str) -> Registry:
    """The registry a `--discovery` URL names: redis:// (key with a TTL) or etcd:// (key under a lease)."""
    if urlsplit(url).scheme == "etcd":
        return EtcdRegistry(url)
    return RedisRegistry(url)


class Registration:
    """Keeps one worker's entry alive in a registry while it serves."""

    def __init__(self, registry: Registry, entry: dict[str, Any], ttl_s: float) -> None:
        self.registry = registry
        self.entry = entry
        self.ttl_s = ttl_s
        self.heartbeats = 0  # successful writes, since start
        self._task: asyncio.Task[None] | None = None
        self._error: str | None = None

    async def _write(self) -> None:
        try:
            await self.registry.register(self.entry, self.ttl_s)
        except DiscoveryError as error:
            if str(error) != self._error:  # say each distinct problem once; keep trying
                log.warning("cannot renew registration of %s: %s", self.entry["address"], error)
            self._error = str(error)
            return
        if self._error is not None or self.heartbeats == 0:
            log.info("registered %s in %s (ttl %gs)", self.entry["address"], self.registry.url, self.ttl_s)
        self._error = None
        self.heartbeats += 1

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            await self._write()

    async def start(self) -> None:
        """Register now (a registry that is down is retried by the heartbeat), then renew every ttl/3."""
        await self._write()
        self._task = asyncio.create_task(self._beat(), name="registry heartbeat")

    async def stop(self) -> None:
        """Stop the heartbeat and delete the entry, so gateways stop sending before the worker stops."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        try:
            await self.registry.deregister(str(self.entry["id"]))
            log.info("deregistered %s", self.entry["address"])
        except DiscoveryError as error:
            log.warning("cannot deregister %s (its entry expires in %gs): %s", self.entry["address"], self.ttl_s, error)
        with contextlib.suppress(DiscoveryError):
            await self.registry.close()


def registration_for(settings: WorkerSettings, port: int, hardware: str = "") -> Registration | None:
    """The registration a worker's `--discovery` asks for: Redis and etcd register; file and DNS need none."""
    url = settings.discovery
    if not url:
        return None
    scheme = urlsplit(url).scheme
    if scheme in ("file", "dns"):
        log.info("discovery %s is kept outside depthserve; this worker does not register itself", scheme)
        return None
    if scheme != "etcd":
        split_url(url)  # validates a Redis URL before anything connects
    registry = registry_for(url)
    address = advertised_address(settings, port, (registry.host, registry.port))
    return Registration(registry, worker_entry(settings, address, hardware), settings.registry_ttl_s)
