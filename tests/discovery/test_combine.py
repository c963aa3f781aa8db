"""Combining sources: the union by address, earlier sources winning, re-published when any changes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.discovery.combine import CombinedSource, merge
from depthserve.discovery.file_source import FileSource
from depthserve.discovery.static import StaticSource
from depthserve.discovery.urls import check_url, make_source


def test_merge_prefers_earlier_sources() -> None:
    static = frozenset({BackendSpec("a:1", 3.0)})
    found = frozenset({BackendSpec("a:1", 1.0, model="m", source="redis"), BackendSpec("b:2", source="redis")})
    assert merge([static, None, found]) == {BackendSpec("a:1", 3.0), BackendSpec("b:2", source="redis")}


async def test_static_and_file_combined(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("- b:2\n")
    combined = CombinedSource([StaticSource(["a:1"]), FileSource(path, poll_s=0.02)])
    updates = combined.updates()
    try:
        seen = {s.address for s in await anext(updates)}
        if seen == {"a:1"}:  # the static set may arrive alone first
            seen = {s.address for s in await anext(updates)}
        assert seen == {"a:1", "b:2"}
        tmp = path.with_suffix(".tmp")
        tmp.write_text("- c:3\n")
        os.replace(tmp, path)
        assert {s.address for s in await anext(updates)} == {"a:1", "c:3"}
    finally:
        await updates.aclose()


def test_urls_are_checked_and_built(tmp_path: Path) -> None:
    assert isinstance(make_source(f"file://{tmp_path}/x.yaml"), FileSource)
    for url in ("redis://127.0.0.1:6379/0?cluster=c1", "dns://workers.local:50051", "dns://127.0.0.1:53/_g._tcp.w"):
        assert check_url(url) == url
    for url, message in (
        ("http://x", "scheme must be one of"),
        ("file://host/x.yaml", "file:///ABSOLUTE"),
        ("dns://workers.local", "needs a port"),
        ("redis://h:1?cluster=a*b", "plain text"),
    ):
        try:
            check_url(url)
        except ValueError as exc:
            assert message in str(exc)
        else:
            raise AssertionError(f"{url} accepted")


class BrokenSource:
    """A source with a bug: it reports once, then raises something that is not a DiscoveryError."""

    name = "broken"

    async def updates(self) -> AsyncIterator[frozenset[BackendSpec]]:
        yield frozenset({BackendSpec("z:9", source="broken")})
        raise TypeError("a bug in a source")


async def test_a_broken_source_neither_freezes_the_others_nor_swallows_cancellation(tmp_path: Path) -> None:
    path = tmp_path / "b.yaml"
    path.write_text("- b:2\n")
    combined = CombinedSource([BrokenSource(), FileSource(path, poll_s=0.02)])
    seen: list[set[str]] = []

    async def follow() -> None:
        async for specs in combined.updates():
            seen.append({s.address for s in specs})

    task = asyncio.create_task(follow())
    while not seen or "b:2" not in seen[-1]:
        await asyncio.sleep(0.01)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("- c:3\n")
    os.replace(tmp, path)
    while "c:3" not in seen[-1]:  # the file source still moves after the broken one died
        await asyncio.sleep(0.01)
    assert seen[-1] == {"z:9", "c:3"}  # the broken source's last set stays in force
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done and task.cancelled()  # stopping discovery ends it, whatever a source raised
