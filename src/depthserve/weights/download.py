"""Fetch a repo's `model.pt` from the hub into the cache: streamed, resumable, checked, renamed when whole."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import httpx
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from depthserve.settings import WeightsSettings
from depthserve.weights.cache import CHECKPOINT_FILENAME, WeightsError, repo_dir

CHUNK_BYTES = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TIMEOUT = httpx.Timeout(30.0, read=120.0)


def download_checkpoint(repo_id: str, settings: WeightsSettings, console: Console | None = None) -> Path:
    """Return the cached `model.pt` of `repo_id`, downloading it first (with a progress bar) if absent."""
    folder = repo_dir(repo_id, settings.cache_dir)
    final = folder / CHECKPOINT_FILENAME
    if final.is_file():
        return final
    url = f"{settings.endpoint.rstrip('/')}/{repo_id}/resolve/main/{CHECKPOINT_FILENAME}"
    part = folder / f"{CHECKPOINT_FILENAME}.part"
    with _translated(url):
        folder.mkdir(parents=True, exist_ok=True)
        with part.open("ab") as out:
            try:
                fcntl.flock(out, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise WeightsError(f"another download into {part} is running") from None
            console = console or Console(stderr=True)
            console.print(f"{url}\n  -> {final}", highlight=False)
            with httpx.Client(follow_redirects=True, timeout=_TIMEOUT) as client:
                expected_sha = _fetch(client, url, out, console)
            os.fsync(out.fileno())
        if expected_sha is not None and _sha256(part) != expected_sha:
            part.unlink()
            raise WeightsError(f"{url}: the download does not match the hub's SHA-256; deleted it, run it again")
        os.replace(part, final)  # atomic: a reader sees no file or the whole file
    return final


def _fetch(client: httpx.Client, url: str, out: BinaryIO, console: Console) -> str | None:
    """Append the rest of the file to `out`, resuming at its size; return the hub's SHA-256 if it gave one."""
    offset = _size(out)
    response = client.send(client.build_request("GET", url, headers=_range(offset)), stream=True)
    try:
        if response.status_code == 416 and offset:  # the partial file is longer than the hub's: start over
            response.close()
            offset = _restart(out)
            response = client.send(client.build_request("GET", url), stream=True)
        _check_status(response, url)
        if response.status_code == 200 and offset:  # the hub ignored the range: start over
            offset = _restart(out)
        total = _total_size(response, offset)
        folder = Path(out.name).parent
        if total is not None and shutil.disk_usage(folder).free < total - offset:
            raise WeightsError(f"{folder}: not enough free space for {total - offset} more bytes")
        columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
        with Progress(*columns, TimeRemainingColumn(), console=console) as progress:
            task = progress.add_task(CHECKPOINT_FILENAME, total=total, completed=offset)
            for chunk in response.iter_bytes():  # as they arrive: a cut keeps every byte received
                out.write(chunk)
                progress.advance(task, len(chunk))
        written = _size(out)
        if total is not None and written != total:
            raise WeightsError(f"{url}: the download stopped at {written} of {total} bytes; run it again to resume")
        return _published_sha256(response)
    finally:
        response.close()


def _range(offset: int) -> dict[str, str]:
    return {"Range": f"bytes={offset}-"} if offset else {}


def _size(out: BinaryIO) -> int:
    out.flush()
    return os.fstat(out.fileno()).st_size


def _restart(out: BinaryIO) -> int:
    out.truncate(0)
    out.seek(0)
    return 0


def _check_status(response: httpx.Response, url: str) -> None:
    if response.status_code in (401, 403):
        status = response.status_code
        raise WeightsError(f"{url}: the hub refused access (HTTP {status}); is the repo private or gated?")
    if response.status_code == 404:
        raise WeightsError(f"{url}: not found (HTTP 404); check the repo id")
    if response.status_code not in (200, 206):
        raise WeightsError(f"{url}: the hub answered HTTP {response.status_code}")


def _total_size(response: httpx.Response, offset: int) -> int | None:
    if response.status_code == 206:
        _, _, total = response.headers.get("content-range", "").rpartition("/")
        return int(total) if total.isdigit() else None
    length = response.headers.get("content-length", "")
    return int(length) + offset if length.isdigit() else None


def _published_sha256(response: httpx.Response) -> str | None:
    """The hub names an LFS file's SHA-256 in X-Linked-Etag (or ETag) on the answer before its redirect."""
    for answer in (*response.history, response):
        for header in ("x-linked-etag", "etag"):
            tag = answer.headers.get(header, "").removeprefix("W/").strip('"').lower()
            if _SHA256.fullmatch(tag):
                return tag
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _translated(url: str) -> Iterator[None]:
    """Turn transport errors into one WeightsError that names the URL; a partial file stays to resume."""
    try:
        yield
    except httpx.HTTPError as exc:
        raise WeightsError(f"{url}: download failed ({type(exc).__name__}: {exc}); run it again to resume") from exc
    except OSError as exc:
        raise WeightsError(f"cannot save the download: {exc}") from exc
