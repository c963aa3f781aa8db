"""Multipart streamed to files: each file part written once into its own file, fields in memory, bad bodies refused."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.multipart_files import WRITE_BYTES, PartsToFiles


def body(
    files: dict[str, bytes] | list[tuple[str, bytes]], fields: dict[str, str] | None = None
) -> tuple[bytes, bytes]:
    """A multipart body as httpx sends it (fields first, then files in order), and its boundary."""
    pairs = list(files.items()) if isinstance(files, dict) else files
    request = httpx.Request("POST", "http://x/", files=[(k, (k, v)) for k, v in pairs], data=fields or {})
    boundary = request.headers["content-type"].split("boundary=")[1].encode()
    return request.read(), boundary


async def feed(parts: PartsToFiles, data: bytes, step: int) -> None:
    for start in range(0, len(data), step):
        await parts.feed(data[start : start + step])
    parts.finish()


async def test_file_parts_go_to_their_files_once_and_fields_stay_in_memory(tmp_path: Path) -> None:
    video = bytes(range(256)) * (WRITE_BYTES // 256 * 3 + 7)  # a few MiB and a tail
    data, boundary = body({"video": video, "depth": b"zip!"}, {"intrinsics": "50,50,32,24"})
    written: list[int] = []
    parts = PartsToFiles(boundary, tmp_path, ("video", "depth"), ("intrinsics",), 3, written.append)
    await feed(parts, data, 65_537)  # chunks that split headers and boundaries anywhere
    assert parts.files["video"].read_bytes() == video and parts.files["depth"].read_bytes() == b"zip!"
    assert parts.fields == {"intrinsics": b"50,50,32,24"}
    assert written[-1] == len(video) + 4  # every byte written once, counted before it was
    assert sorted(path.name for path in tmp_path.iterdir()) == ["depth", "video"]  # no copy anywhere else


@pytest.mark.parametrize(
    ("files", "fields", "status", "words"),
    [
        ({"picture": b"x"}, {}, 400, "unexpected multipart part"),
        ([("video", b"x"), ("depth", b"y"), ("video", b"z")], {"intrinsics": "1"}, 413, "more than 3 parts"),
        ([("video", b"x"), ("video", b"z")], {}, 400, "given twice"),
        ({"video": b"x"}, {"intrinsics": "9" * 70_000}, 413, "exceeds"),
    ],
)
async def test_bad_parts_are_refused(
    tmp_path: Path, files: dict[str, bytes] | list[tuple[str, bytes]], fields: dict[str, str], status: int, words: str
) -> None:
    data, boundary = body(files, fields)
    parts = PartsToFiles(boundary, tmp_path, ("video", "depth"), ("intrinsics",), 3)
    with pytest.raises(GatewayError) as refused:
        await feed(parts, data, 4096)
    assert refused.value.status == status and words in refused.value.message


async def test_a_body_cut_short_or_garbled_is_a_400(tmp_path: Path) -> None:
    data, boundary = body({"video": b"x" * 1000})
    parts = PartsToFiles(boundary, tmp_path, ("video",), (), 3)
    with pytest.raises(GatewayError, match="closing boundary"):
        await feed(parts, data[: len(data) // 2], 100)
    garbled = PartsToFiles(boundary, tmp_path / "g", ("video",), (), 3)
    with pytest.raises(GatewayError) as refused:
        await feed(garbled, b"--" + boundary + b"\r\nno colon here\r\n\r\n", 100)
    assert refused.value.status == 400
