"""A small HTTP/2 client for the gateway, used by `depthserve predict`."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

_FORMATS = {".npy": "npy", ".ply": "ply"}
_MEDIA = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp"}


def output_format(output: Path, preview: bool) -> str:
    """Choose the result format from the output file's extension."""
    suffix = output.suffix.lower()
    if suffix == ".png":
        return "preview" if preview else "png16"
    if suffix not in _FORMATS:
        raise ValueError(f"output must end in .npy, .png or .ply, got {output.name!r}")
    return _FORMATS[suffix]


def _intrinsics_text(value: str) -> str:
    path = Path(value)
    return path.read_text() if path.is_file() else value


def predict_file(
    image: Path,
    output: Path,
    depth: Path | None,
    intrinsics: str | None,
    preview: bool,
    resolution_level: int,
    url: str,
) -> int:
    """POST one image (with optional depth and intrinsics) to /v1/depth and save the reply; return an exit code."""
    try:
        fmt = output_format(output, preview)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    files: dict[str, tuple[str, bytes, str]] = {
        "image": (image.name, image.read_bytes(), _MEDIA.get(image.suffix.lower(), "application/octet-stream"))
    }
    if depth is not None:
        files["depth"] = (depth.name, depth.read_bytes(), "application/octet-stream")
    data = {"intrinsics": _intrinsics_text(intrinsics)} if intrinsics else None
    with httpx.Client(http1=url.startswith("https"), http2=True, timeout=120.0) as client:
        try:
            reply = client.post(
                f"{url.rstrip('/')}/v1/depth",
                params={"format": fmt, "resolution_level": resolution_level},
                files=files,
                data=data,
            )
        except httpx.HTTPError as exc:
            print(f"error: cannot reach {url}: {exc}", file=sys.stderr)
            return 1
    if reply.status_code != 200:
        print(f"error {reply.status_code}: {reply.text}", file=sys.stderr)
        return 1
    output.write_bytes(reply.content)
    print(f"wrote {output} ({len(reply.content)} bytes, backend {reply.headers.get('x-backend', '?')})")
    return 0
