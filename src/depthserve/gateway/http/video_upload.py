"""A /v1/depth/video upload, written to a private temporary folder as it arrives (never held in memory).

The body is a video (`video/mp4`, `video/webm`, `video/quicktime`), or multipart with a `video` file,
optional `depth` (a zip of 16-bit PNGs or an .npz) and optional `intrinsics`. Bytes go to disk in
1 MiB writes from a thread, so neither memory nor the event loop waits on a large upload.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.types import Receive, Scope

from depthserve.codec import CodecError, parse_intrinsics
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import BodyReader

VIDEO_TYPES = ("video/mp4", "video/webm", "video/quicktime")
WRITE_BYTES = 1 << 20  # bytes gathered before one write to the file
MAX_PARTS = 3


@dataclass(frozen=True)
class VideoUpload:
    """The uploaded files on disk, and the intrinsics, until `close` removes the folder."""

    folder: Path
    video: Path
    depth: Path | None = None
    intrinsics: np.ndarray | None = None

    async def close(self) -> None:
        """Remove the files (in a thread)."""
        await asyncio.to_thread(shutil.rmtree, self.folder, True)


async def _write(reader: BodyReader, out: BinaryIO) -> int:
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
            data = b"".join(buffer)
            buffer.clear()
            held = 0
            await asyncio.to_thread(out.write, data)
    return size


async def _copy_part(part: UploadFile, path: Path) -> None:
    def copy() -> None:
        part.file.seek(0)
        with path.open("wb") as out:
            shutil.copyfileobj(part.file, out, WRITE_BYTES)

    await asyncio.to_thread(copy)


async def _multipart(scope: Scope, reader: BodyReader, folder: Path) -> VideoUpload:
    request = Request(scope, reader.receive)
    try:
        form = await request.form(max_files=MAX_PARTS, max_fields=MAX_PARTS)
    except GatewayError:
        raise
    except Exception as exc:  # noqa: BLE001 - starlette raises several types for malformed multipart
        if "Too many" in str(exc):
            raise await reader.refuse(GatewayError(413, "too_many_parts", f"more than {MAX_PARTS} parts")) from None
        raise await reader.refuse(GatewayError(400, "invalid_request", f"malformed multipart body: {exc}")) from None
    try:
        video, depth, text = form.get("video"), form.get("depth"), form.get("intrinsics")
        if not isinstance(video, UploadFile) or not video.size:
            raise GatewayError(400, "invalid_request", "multipart body needs a non-empty file part named 'video'")
        await _copy_part(video, folder / "video")
        depth_path = None
        if isinstance(depth, UploadFile) and depth.size:
            depth_path = folder / "depth"
            await _copy_part(depth, depth_path)
        intrinsics = None
        if text:
            raw = await text.read() if isinstance(text, UploadFile) else text
            try:
                intrinsics = parse_intrinsics(raw)
            except CodecError as exc:
                raise GatewayError(400, "invalid_request", str(exc)) from None
        return VideoUpload(folder, folder / "video", depth_path, intrinsics)
    finally:
        await form.close()


async def read_video_upload(
    scope: Scope, receive: Receive, headers: Mapping[str, str], max_bytes: int, spool_dir: Path | None
) -> VideoUpload:
    """Read the request body to files; 415 for another content type, 413 past `max_bytes`, 400 when empty."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in VIDEO_TYPES and content_type != "multipart/form-data":
        raise GatewayError(
            415,
            "unsupported_media_type",
            f"content type {content_type or '(none)'!r} not supported; send {', '.join(VIDEO_TYPES)} "
            "or multipart/form-data with a 'video' part",
        )
    reader = BodyReader(receive, max_bytes, scope.get("http_version") == "2", scope)
    declared = headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        raise await reader.refuse(reader.too_large(declared))
    if spool_dir is not None:
        spool_dir.mkdir(parents=True, exist_ok=True)
    folder = Path(await asyncio.to_thread(tempfile.mkdtemp, "", "depthserve-video-", spool_dir))
    try:
        if content_type == "multipart/form-data":
            return await _multipart(scope, reader, folder)
        path = folder / "video"
        with path.open("wb") as out:
            size = await _write(reader, out)
        if not size:
            raise GatewayError(400, "invalid_request", "empty request body; send a video")
        return VideoUpload(folder, path)
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, folder, True)
        raise
