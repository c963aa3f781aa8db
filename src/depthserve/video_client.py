"""`depthserve predict clip.mp4 -o depth.zip`: stream a video to the gateway, and its depth back to a file,
with a progress bar of frames done, frames per second and time left."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from depthserve.video.follow import FrameCounter

VIDEO_SUFFIXES = {".mp4": "video/mp4", ".m4v": "video/mp4", ".webm": "video/webm", ".mov": "video/quicktime"}
OUTPUTS = {".zip": "zip", ".npz": "npz", ".mp4": "mp4"}
CHUNK = 1 << 20
ITEMSIZE = {"float16": 2, "float32": 4}


def is_video(path: Path) -> bool:
    """Whether `predict` should treat the input as a video (by its extension)."""
    return path.suffix.lower() in VIDEO_SUFFIXES


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as source:
        while chunk := source.read(CHUNK):
            yield chunk


def _frame_bytes(reply: httpx.Response, dtype: str) -> int:
    width, _, height = reply.headers.get("x-video-size", "0x0").partition("x")
    return int(width or 0) * int(height or 0) * ITEMSIZE[dtype]


def predict_video(
    video: Path,
    output: Path,
    options: dict[str, str | int],
    url: str,
    depth: Path | None = None,
    intrinsics: str | None = None,
) -> int:
    """POST the video to /v1/depth/video and write the reply to `output` as it streams; return an exit code."""
    fmt = OUTPUTS.get(output.suffix.lower())
    if fmt is None:
        print(f"error: a video's output must end in .zip, .npz or .mp4, got {output.name!r}", file=sys.stderr)
        return 2
    params = {**options, "format": fmt}
    partial = output.with_name(output.name + ".part")  # only a complete reply takes the output's name
    if depth is not None or intrinsics:
        files: dict[str, tuple[str | None, bytes | str, str]] = {
            "video": (video.name, video.read_bytes(), VIDEO_SUFFIXES[video.suffix.lower()])
        }
        if depth is not None:
            files["depth"] = (depth.name, depth.read_bytes(), "application/octet-stream")
        if intrinsics:
            files["intrinsics"] = (None, intrinsics, "text/plain")
        request: dict[str, object] = {"files": files}
    else:
        request = {"content": _chunks(video), "headers": {"content-type": VIDEO_SUFFIXES[video.suffix.lower()]}}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[fps]}"))
    try:
        with (
            httpx.Client(http1=url.startswith("https"), http2=True, timeout=httpx.Timeout(120.0)) as client,
            client.stream(
                "POST",
                f"{url.rstrip('/')}/v1/depth/video",
                params=params,
                **request,  # type: ignore[arg-type]
            ) as reply,
        ):
            if reply.status_code != 200:
                reply.read()
                print(f"error {reply.status_code}: {reply.text}", file=sys.stderr)
                return 1
            total = int(reply.headers.get("x-video-frames", "0"))
            counter = FrameCounter(fmt, _frame_bytes(reply, str(options.get("dtype", "float16"))))
            with (
                Progress(*columns, TimeElapsedColumn(), TimeRemainingColumn(), transient=False) as bar,
                partial.open("wb") as out,
            ):
                task = bar.add_task(f"{video.name} frames", total=total, fps="")
                for chunk in reply.iter_raw():
                    out.write(chunk)
                    done = counter.feed(chunk)
                    speed = bar.tasks[0].speed
                    bar.update(task, completed=done, fps=f"{speed:.1f} fps" if speed else "")
                bar.update(task, completed=counter.finished(total))
    except httpx.HTTPError as exc:
        partial.unlink(missing_ok=True)
        print(
            f"error: the video failed or the connection broke ({type(exc).__name__}: {exc}); nothing written",
            file=sys.stderr,
        )
        return 1
    partial.replace(output)
    print(f"wrote {output} ({total} frames, {output.stat().st_size} bytes)")
    return 0
