"""What a client asks of one video (frames to take, output format) and what the gateway lets one video cost."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from depthserve.protocol.depth_api import DEFAULT_RESOLUTION_LEVEL
from depthserve.settings import VideoFields
from depthserve.video.errors import VideoError

# Output formats by name, with the media type each is served as.
MEDIA_TYPES = {"zip": "application/zip", "npz": "application/x-npz", "mp4": "video/mp4"}
DTYPES = ("float16", "float32")


@dataclass(frozen=True)
class VideoLimits:
    """What one video may cost: frames (after stride), pixels per frame, seconds, and frames in flight."""

    max_frames: int = 10_000
    max_frame_pixels: int = 8_300_000
    max_seconds: float = 3600.0
    window: int = 16

    @classmethod
    def from_settings(cls, settings: VideoFields) -> VideoLimits:
        """The limits a gateway's settings set."""
        return cls(
            settings.video_max_frames,
            settings.video_max_frame_pixels,
            settings.video_max_seconds,
            settings.video_window,
        )


@dataclass(frozen=True)
class VideoOptions:
    """One video request's choices: every `stride`-th frame, at most `max_frames`, in `output` format."""

    stride: int = 1
    max_frames: int | None = None
    resolution_level: int = DEFAULT_RESOLUTION_LEVEL
    output: str = "zip"
    dtype: str = "float16"

    @property
    def media_type(self) -> str:
        """The reply's Content-Type."""
        return MEDIA_TYPES[self.output]


def _positive(query: Mapping[str, str], name: str, low: int, high: int | None = None) -> int | None:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if not (raw.isascii() and raw.isdigit()) or int(raw) < low or (high is not None and int(raw) > high):
        bound = f"{low}-{high}" if high is not None else f">= {low}"
        raise VideoError(400, "invalid_request", f"{name} must be an integer {bound}, got {raw[:40]!r}")
    return int(raw)


def output_format(accept: str | None, given: str | None) -> str:
    """The output format: `?format=` (zip, npz, mp4) wins, then the first Accept media type we serve, else zip."""
    if given:
        name = given.strip().lower()
        if name not in MEDIA_TYPES:
            raise VideoError(406, "unsupported_format", f"format must be one of {', '.join(MEDIA_TYPES)}, got {name!r}")
        return name
    if not accept or not accept.strip():
        return "zip"
    by_media = {media: name for name, media in MEDIA_TYPES.items()}
    for item in accept.split(","):
        media = item.split(";")[0].strip().lower()
        if media in by_media:
            return by_media[media]
        if media in ("*/*", "application/*"):
            return "zip"
        if media == "video/*":
            return "mp4"
    raise VideoError(
        406,
        "unsupported_format",
        f"no video output for Accept: {accept.strip()[:80]!r}; serve {', '.join(MEDIA_TYPES.values())}",
    )


def parse_options(query: Mapping[str, str], accept: str | None) -> VideoOptions:
    """Read stride, max_frames, resolution_level, format and dtype from the query (400/406 on bad values)."""
    dtype = (query.get("dtype") or "float16").strip().lower()
    if dtype not in DTYPES:
        raise VideoError(400, "invalid_request", f"dtype must be float16 or float32, got {dtype[:20]!r}")
    level = _positive(query, "resolution_level", 0, 9)
    return VideoOptions(
        stride=_positive(query, "stride", 1) or 1,
        max_frames=_positive(query, "max_frames", 1),
        resolution_level=DEFAULT_RESOLUTION_LEVEL if level is None else level,
        output=output_format(accept, query.get("format")),
        dtype=dtype,
    )
