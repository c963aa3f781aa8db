"""The colourised preview: depth frames as turbo colours, encoded to H.264 in fragmented MP4 with PyAV.

Fragmented MP4 (an empty `moov` first, then one `moof`+`mdat` per second of video) needs no seek
back, so it streams as it is encoded and plays while it arrives. The colour scale is set once per
video, from the first frame's 2nd..98th depth percentiles, so colours mean the same distance in every
frame (a per-frame scale would flicker). Width and height are cropped to even numbers (yuv420p).
Colouring and encoding run in a thread, one frame at a time, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from fractions import Fraction

import av
import numpy as np

from depthserve.codec.colormap import TURBO_LUT
from depthserve.codec.preview import depth_range
from depthserve.video.outputs import FrameResult, read_depth

FRAGMENT_OPTIONS = {"movflags": "frag_keyframe+empty_moov+default_base_moof"}
ENCODER_OPTIONS = {"preset": "veryfast", "tune": "zerolatency", "crf": "23"}


class _Sink:
    """A write-only file for the muxer: what it writes is taken out after every frame."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._pieces.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data = b"".join(self._pieces)
        self._pieces.clear()
        return data


def colourise(depth: np.ndarray, near: float, far: float) -> np.ndarray:
    """Turbo colours for depth in [near, far] (near = red), invalid pixels black, as RGB uint8."""
    valid = np.isfinite(depth) & (depth > 0)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = (
            (np.float32(far) - depth) * np.float32(255.0 / (far - near))
            if far > near
            else np.full(depth.shape, 128, np.float32)
        )
    scaled = np.nan_to_num(scaled, nan=0.0, posinf=0.0, neginf=0.0)
    np.clip(scaled, 0, 255, out=scaled)
    rgb = TURBO_LUT[scaled.astype(np.uint8)]
    rgb[~valid] = 0
    return rgb


class Mp4Output:
    """A turbo-coloured H.264 preview, one output frame per frame taken, at the source's rate over the stride."""

    worker_format = "npy"

    def __init__(self, height: int, width: int, fps: float) -> None:
        self._size = (height, width)
        self._even = (height - height % 2, width - width % 2)
        self._rate = Fraction(fps or 10.0).limit_denominator(1001)
        self._sink = _Sink()
        self._container = av.open(self._sink, "w", format="mp4", options=FRAGMENT_OPTIONS)
        self._stream = self._container.add_stream("libx264", rate=self._rate)
        self._stream.height, self._stream.width = self._even
        self._stream.pix_fmt = "yuv420p"
        self._stream.options = {**ENCODER_OPTIONS, "g": str(max(1, round(float(self._rate))))}  # a fragment a second
        self._range: tuple[float, float] | None = None
        self._count = 0

    def start(self) -> bytes:
        """Nothing is written before the first frame is encoded."""
        return b""

    def _encode(self, data: bytes) -> bytes:
        depth = read_depth(data, *self._size)
        if self._range is None:
            valid = depth[np.isfinite(depth) & (depth > 0)]
            self._range = depth_range(valid) if valid.size else (0.0, 1.0)
        rgb = colourise(depth[: self._even[0], : self._even[1]], *self._range)
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self._count
        self._count += 1
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.take()

    async def add(self, result: FrameResult) -> bytes:
        """Colour and encode one frame (in a thread); gives what the muxer wrote (often nothing mid-fragment)."""
        return await asyncio.to_thread(self._encode, result.data)

    def _finish(self) -> bytes:
        for packet in self._stream.encode():
            self._container.mux(packet)
        self._container.close()
        return self._sink.take()

    async def finish(self) -> bytes:
        """Flush the encoder and close the file."""
        return await asyncio.to_thread(self._finish)

    def _abort(self) -> None:
        # An encoder that failed mid-frame may refuse to flush: the file is dropped anyway.
        with contextlib.suppress(av.error.FFmpegError, ValueError):
            self._container.close()

    async def abort(self) -> None:
        """Drop the encoder (its file is incomplete and never sent whole)."""
        await asyncio.to_thread(self._abort)
