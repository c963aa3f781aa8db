"""The file source: both entry forms, reload on change, and a broken file keeping the last good set."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from depthserve.discovery.backend_spec import BackendSpec
from depthserve.discovery.errors import DiscoveryError
from depthserve.discovery.file_source import FileSource, parse_backends_yaml

pytestmark = pytest.mark.timeout(30)


def write(path: Path, text: str) -> None:
    """Replace the file atomically, as an operator's tooling should."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_both_entry_forms_and_tags() -> None:
    specs = parse_backends_yaml(
        "backends:\n  - 10.0.0.1:50051@2\n"
        "  - {address: '10.0.0.2:50051', model: m, version: v2, weight: auto, id: w2, hardware: h100}\n"
    )
    assert specs == {
        BackendSpec("10.0.0.1:50051", 2.0, source="file"),
        BackendSpec("10.0.0.2:50051", None, model="m", version="v2", id="w2", hardware="h100", source="file"),
    }
    listed = parse_backends_yaml("- a:1\n- b:2\n")
    assert listed == {BackendSpec("a:1", source="file"), BackendSpec("b:2", source="file")}
    assert parse_backends_yaml("") == frozenset() == parse_backends_yaml("backends: []\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("workers: [a:1]\n", "unknown top-level keys"),
        ("backends: a:1\n", "expected a list"),
        ("- nohost\n", "HOST:PORT"),
        ("- {address: 'a:1', colour: red}\n", "unknown fields"),
        ("- {model: m}\n", "no 'address'"),
        ("- a:1\n- a:1@2\n", "listed twice"),
        ("- 7\n", "neither HOST:PORT nor a mapping"),
    ],
)
def test_malformed_files_say_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_backends_yaml(text)


async def test_reloads_on_change_and_keeps_the_last_good_set(tmp_path: Path) -> None:
    path = tmp_path / "backends.yaml"
    write(path, "- a:1\n")
    source = FileSource(path, poll_s=0.02)
    updates = source.updates()
    try:
        assert {s.address for s in await anext(updates)} == {"a:1"}
        write(path, "- a:1\n- b:2\n")
        assert {s.address for s in await anext(updates)} == {"a:1", "b:2"}
        write(path, "- [broken\n")
        nxt = asyncio.ensure_future(anext(updates))
        while source.failures == 0:
            await asyncio.sleep(0.02)
        assert not nxt.done() and "backends file" in (source.last_error or "")  # nothing yielded: old set stays
        write(path, "- b:2\n")
        assert {s.address for s in await nxt} == {"b:2"}
    finally:
        await updates.aclose()


def test_missing_file_is_a_discovery_error(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="No such file"):
        FileSource(tmp_path / "absent.yaml").load()
