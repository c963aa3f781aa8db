"""The gateway's background work for a changing cluster: apply discovery to the pool, reload version routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from depthserve.discovery.combine import CombinedSource
from depthserve.discovery.source import Backends, DiscoverySource
from depthserve.discovery.static import StaticSource
from depthserve.discovery.urls import make_source
from depthserve.gateway.upstream.pool import BackendPool
from depthserve.gateway.upstream.version_split import VersionSplitter
from depthserve.settings import GatewaySettings, load_settings

log = logging.getLogger("depthserve.gateway")


def apply(pool: BackendPool, specs: Backends) -> tuple[int, int]:
    """Make the pool's membership match `specs`: add or update those named, remove the rest; give counts."""
    wanted = {spec.address: spec for spec in specs}
    added = removed = 0
    for address, spec in wanted.items():
        backend = pool.backends.get(address)
        if backend is None or backend.leaving or backend.spec != spec:
            pool.add(spec)
            added += 1
    for address, backend in list(pool.backends.items()):
        if address not in wanted and not backend.leaving:
            pool.remove(address)
            removed += 1
    return added, removed


def discovery_source(settings: GatewaySettings) -> DiscoverySource | None:
    """The combined source of `--backends` and every `--discovery` URL; None when there is only the static list."""
    if not settings.discovery:
        return None
    sources: list[DiscoverySource] = [StaticSource(settings.backends, settings.auto_weights)]
    sources += [make_source(url, settings.discovery_poll_s, settings.auto_weights) for url in settings.discovery]
    return CombinedSource(sources)


async def follow(pool: BackendPool, source: DiscoverySource) -> None:
    """Apply every update of the source to the pool, for as long as it runs (restarting it if it breaks)."""
    while True:
        try:
            async for specs in source.updates():
                added, removed = apply(pool, specs)
                if added or removed:
                    log.info("discovery: %d backends (%d added or changed, %d leaving)", len(specs), added, removed)
        except Exception:  # noqa: BLE001 - a dead follower would freeze membership; log and start over
            log.exception("discovery failed unexpectedly; restarting it")
        await asyncio.sleep(1.0)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


async def reload_routes(pool: BackendPool, config_file: Path, poll_s: float) -> None:
    """Re-read the config file's `versions` when the file changes; a bad file keeps the routes in force."""
    last = _stamp(config_file)
    while True:
        await asyncio.sleep(poll_s)
        stamp = _stamp(config_file)
        if stamp is None or stamp == last:
            continue
        last = stamp
        try:
            settings = await asyncio.to_thread(load_settings, GatewaySettings, config_file)
        except Exception as exc:  # noqa: BLE001 - pydantic, YAML and OS errors alike: keep serving, say why
            log.warning("config %s not reloaded, keeping the version routes in force: %s", config_file, exc)
            continue
        pool.routes = VersionSplitter.from_config(settings.versions, settings.version_seed)
        log.info("version routes reloaded from %s: %s", config_file, pool.routes.describe())


def start(pool: BackendPool, settings: GatewaySettings) -> list[asyncio.Task[None]]:
    """Start following discovery and the config file, as the settings ask."""
    tasks = []
    source = discovery_source(settings)
    if source is not None:
        tasks.append(asyncio.create_task(follow(pool, source), name="discovery"))
    if settings.config_file is not None:
        tasks.append(
            asyncio.create_task(reload_routes(pool, settings.config_file, settings.discovery_poll_s), name="routes")
        )
    return tasks


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks `start` gave and wait for them."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
