"""A video upload, written to a private folder as it arrives (never held in memory), once, under a disk budget.

The body is a video (`video/mp4`, `video/webm`, `video/quicktime`), or multipart with a `video` file,
optional `depth` (a zip of 16-bit PNGs or an .npz) and optional `intrinsics`. Bytes go to disk in
1 MiB writes from a thread, multipart file parts straight into their own files (multipart_files.py),
so neither memory nor the event loop waits on a large upload. Every byte on disk is counted against
the gateway's video disk budget (edge/video_disk.py) until the upload is closed.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from python_multipart.multipart import parse_options_header
from starlette.types import Receive, Scope

from depthserve.codec import CodecError, parse_intrinsics
from depthserve.gateway.edge.video_disk import DiskLease, VideoDisk
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import BodyReader
from depthserve.gateway.http.multipart_files import PartsToFiles

VIDEO_TYPES = ("video/mp4", "video/webm", "video/quicktime")
WRITE_BYTES = 1 << 20  # bytes gathered before one write to the file
MAX_PARTS = 3


@dataclass(frozen=True)
class VideoUpload:
    """The uploaded files on disk, and the intrinsics, until `close` removes the folder and frees its bytes."""

    folder: Path
    video: Path
    lease: DiskLease
    depth: Path | None = None
    intrinsics: np.ndarray | None = None

    async def close(self) -> None:
        """Remove the files (in a thread), then give their bytes back to the disk budget."""
        await asyncio.to_thread(shutil.rmtree, self.folder, True)
        self.lease.release()


async def _refused(reader: BodyReader, error: GatewayError, more: bool) -> GatewayError:
    """An upload refused while its body still arrives: drain it first, so the client sees the answer."""
    return await reader.refuse(error, always=error.reason == "video_disk_full") if more else error


def _size_of(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir())


async def _write(reader: BodyReader, out: BinaryIO, lease: DiskLease) -> int:
    """Copy the body to `out` in large writes made in a thread; give its size."""
    buffer: list[bytes] = []
    held = size = 0
    more = True
    while more:
        message = await reader.receive()
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        buffer.append(chunk)
        held += len(chunk)
        size += len(chunk)
        if held >= WRITE_BYTES or not more:
            try:
                lease.cover(size)
            except GatewayError as error:
                raise await _refused(reader, error, more) from None
            data = b"".join(buffer)
            buffer.clear()
            held = 0
            await asyncio.to_thread(out.write, data)
    return size


async def _multipart(reader: BodyReader, boundary: bytes, folder: Path, lease: DiskLease) -> VideoUpload:
    parts = PartsToFiles(boundary, folder, ("video", "depth"), ("intrinsics",), MAX_PARTS, lease.cover)
    more = True
    while more:
        message = await reader.receive()
        more = message.get("more_body", False)
        try:
            await parts.feed(message.get("body", b""))
        except GatewayError as error:
            raise await _refused(reader, error, more) from None
    parts.finish()
    video = parts.files.get("video")
    if video is None or not video.exists() or not video.stat().st_size:
        raise GatewayError(400, "invalid_request", "multipart body needs a non-empty file part named 'video'")
    depth = parts.files.get("depth")
    if depth is not None and not depth.stat().st_size:
        depth = None
    intrinsics = None
    if parts.fields.get("intrinsics"):
        try:
            intrinsics = parse_intrinsics(parts.fields["intrinsics"].decode("latin-1"))
        except CodecError as exc:
            raise GatewayError(400, "invalid_request", str(exc)) from None
    return VideoUpload(folder, video, lease, depth, intrinsics)


async def read_video_upload(
    scope: Scope, receive: Receive, headers: Mapping[str, str], max_bytes: int, disk: VideoDisk
) -> VideoUpload:
    """Read the request body to files; 415 for another content type, 413 past `max_bytes`, 400 when empty,
    503 video_disk_full past the disk budget."""
    raw_type = headers.get("content-type", "")
    content_type = raw_type.split(";")[0].strip().lower()
    if content_type not in VIDEO_TYPES and content_type != "multipart/form-data":
        raise GatewayError(
            415,
            "unsupported_media_type",
            f"content type {content_type or '(none)'!r} not supported; send {', '.join(VIDEO_TYPES)} "
            "or multipart/form-data with a 'video' part",
        )
    reader = BodyReader(receive, max_bytes, scope.get("http_version") == "2", scope)
    boundary = parse_options_header(raw_type)[1].get(b"boundary") if content_type == "multipart/form-data" else b""
    if boundary is None:
        raise await reader.refuse(GatewayError(400, "invalid_request", "multipart body without a boundary"))
    declared = headers.get("content-length")
    lease = disk.lease()
    try:
        if declared is not None and declared.isascii() and declared.isdigit():
            if int(declared) > max_bytes:
                raise await reader.refuse(reader.too_large(declared))
            lease.cover(int(declared))  # refused before a byte is read
    except GatewayError as error:
        lease.release()
        raise await reader.refuse(error, always=error.status == 503) from None
    folder = await disk.folder()
    try:
        if boundary:
            upload = await _multipart(reader, boundary, folder, lease)
        else:
            path = folder / "video"
            with path.open("wb") as out:
                size = await _write(reader, out, lease)
            if not size:
                raise GatewayError(400, "invalid_request", "empty request body; send a video")
            upload = VideoUpload(folder, path, lease)
        lease.trim(await asyncio.to_thread(_size_of, folder))  # the multipart framing and a declared surplus
        return upload
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, folder, True)
        lease.release()
        raise
