"""Read a video's header and packets (no decoding) to refuse it cleanly before any frame is sent.

Demuxing the whole file is cheap next to decoding it, and it tells what the header alone cannot: the
number of frames (so an .npz stack's shape is known before its first byte goes out, and a job can
report its progress against a total) and whether the file ends early. A truncated file is a 400 here,
before the reply starts, rather than a reply cut short later. Blocking: call it in a thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from depthserve.video.errors import VideoError, corrupt, too_large, truncated
from depthserve.video.options import VideoLimits, VideoOptions

# Decoders a video may use; others are refused (415) rather than half-supported.
CODECS = ("h264", "hevc", "vp8", "vp9", "av1", "mpeg4", "mjpeg")
_END_SLACK_FRAMES = 1.5  # packets may end this many frame durations before the stated duration


@dataclass(frozen=True)
class VideoInfo:
    """What the probe learnt: codec, frame size, frame count and rate, duration, and the frames to take."""

    codec: str
    width: int
    height: int
    frames: int  # frames in the file
    fps: float
    duration_s: float
    taken: int  # frames that will be processed, after stride and max_frames

    def source_index(self, position: int, stride: int) -> int:
        """The file frame index of the `position`-th frame taken."""
        return position * stride


def frames_taken(frames: int, options: VideoOptions) -> int:
    """How many frames a video of `frames` frames gives with the request's stride and max_frames."""
    taken = math.ceil(frames / options.stride)
    return taken if options.max_frames is None else min(taken, options.max_frames)


def _rate(stream: av.video.stream.VideoStream) -> float:
    rate = stream.average_rate or stream.base_rate or stream.guessed_rate
    return float(rate) if rate else 0.0


def _check_size(codec: str, width: int, height: int, limits: VideoLimits) -> None:
    if codec not in CODECS:
        raise VideoError(415, "unsupported_codec", f"video codec {codec!r} is not supported; use {', '.join(CODECS)}")
    if width < 1 or height < 1:
        raise corrupt(f"video stream has no usable frame size ({width}x{height})")
    if width * height > limits.max_frame_pixels:
        raise too_large(
            "too_many_pixels", f"video frames of {width}x{height} exceed the limit of {limits.max_frame_pixels} pixels"
        )


def _count_packets(container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> tuple[int, float]:
    """Frames (non-empty, intact packets) in the stream, and the end time of the last one in seconds."""
    count, end = 0, 0.0
    base = stream.time_base or Fraction(1, 1)
    for packet in container.demux(stream):
        if not packet.size:
            continue
        if packet.is_corrupt:
            raise truncated(f"video data ends inside frame {count} (packet cut short)")
        count += 1
        if packet.pts is not None:
            end = max(end, float((packet.pts + (packet.duration or 0)) * base))
    return count, end


def probe(path: Path, options: VideoOptions, limits: VideoLimits) -> VideoInfo:
    """Check codec, frame size, frame count, duration and completeness; raise VideoError (400/413/415)."""
    try:
        with av.open(str(path), metadata_errors="ignore") as container:
            if not container.streams.video:
                raise VideoError(415, "unsupported_media_type", "the upload holds no video stream")
            stream = container.streams.video[0]
            codec = stream.codec_context.name
            width, height = stream.codec_context.width, stream.codec_context.height
            _check_size(codec, width, height, limits)
            stated_s = container.duration / av.time_base if container.duration else 0.0
            if stated_s > limits.max_seconds:
                raise too_large("too_long", f"video of {stated_s:.1f}s exceeds the limit of {limits.max_seconds:g}s")
            stated_frames = stream.frames
            fps = _rate(stream)  # while open: av 18.1.1 refuses a closed container's stream attributes
            count, end_s = _count_packets(container, stream)
    except VideoError:
        raise
    except av.error.FFmpegError as exc:
        raise corrupt(f"not a readable video (truncated or corrupt): {exc.strerror or type(exc).__name__}") from None
    if count == 0:
        raise corrupt("the video stream holds no frames")
    if stated_frames and count < stated_frames:
        raise truncated(f"video header says {stated_frames} frames but the file holds {count}")
    if stated_s and fps and end_s and end_s < stated_s - _END_SLACK_FRAMES / fps:
        raise truncated(f"video header says {stated_s:.2f}s but its frames end at {end_s:.2f}s")
    duration_s = stated_s or end_s
    if duration_s > limits.max_seconds:
        raise too_large("too_long", f"video of {duration_s:.1f}s exceeds the limit of {limits.max_seconds:g}s")
    taken = frames_taken(count, options)
    if taken > limits.max_frames:
        raise too_large(
            "too_many_frames",
            f"video gives {taken} frames (stride {options.stride}), over the limit of {limits.max_frames}; "
            "raise stride or set max_frames",
        )
    return VideoInfo(codec, width, height, count, fps, duration_s, taken)
