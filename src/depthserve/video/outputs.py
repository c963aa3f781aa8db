"""The reply formats, each written frame by frame as results arrive in order: a zip of 16-bit PNGs, or an
.npz depth stack.

zip: `depth_000000.png`, ... (16-bit PNG, millimetres, 0 = invalid: the worker's own `png16` encoding,
passed through), then `frames.csv` (`position,frame,time_s`: the file frame each entry came from and
its timestamp). npz: `depth.npy`, one (N, H, W) stack in metres (float16 by default, float32 with
`dtype=float32`; +inf where the model masks a pixel, as `/v1/depth`'s .npy), then `timestamps.npy`
(N float64 seconds) and `frames.npy` (N int64 file frame indices). N is known from the probe before the
stack's header is written; a video that decodes to fewer frames fails (its reply is cut short).
"""

from __future__ import annotations

import asyncio
import io
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from depthserve.codec.npy import read_npy_header
from depthserve.video.errors import VideoError
from depthserve.video.zip_stream import ZipStream

MAX_CONVERT_ON_LOOP = 64 * 64  # pixels: smaller depth maps are converted without a thread hop


@dataclass(frozen=True)
class FrameResult:
    """A worker's answer for one frame: its encoded file (png16 or npy) with the frame's place and time."""

    position: int
    source: int
    time_s: float
    data: bytes


class Output(Protocol):
    """A reply format: the worker format it needs, and the bytes it adds per frame, in order."""

    worker_format: str

    def start(self) -> bytes: ...  # noqa: D102

    async def add(self, result: FrameResult) -> bytes: ...  # noqa: D102

    async def finish(self) -> bytes: ...  # noqa: D102

    async def abort(self) -> None: ...  # noqa: D102


def read_depth(data: bytes, height: int, width: int) -> np.ndarray:
    """The float32 (H, W) depth map in a worker's .npy reply, checked against the frame's size."""
    header = read_npy_header(data)
    if header.shape != (height, width) or header.dtype != np.dtype("<f4") or header.fortran_order:
        raise VideoError(
            502, "backend_error", f"worker sent a {header.dtype} {header.shape} depth map for a {width}x{height} frame"
        )
    return np.frombuffer(data, dtype="<f4", count=height * width, offset=header.offset).reshape(height, width)


def _timeline(results: list[tuple[int, float]]) -> str:
    rows = ["position,frame,time_s", *(f"{i},{source},{time_s:.6f}" for i, (source, time_s) in enumerate(results))]
    return "\n".join(rows) + "\n"


class ZipOutput:
    """16-bit PNG depth frames in a zip, one entry per frame, then frames.csv."""

    worker_format = "png16"

    def __init__(self) -> None:
        self._zip = ZipStream()
        self._times: list[tuple[int, float]] = []

    def start(self) -> bytes:
        """Nothing comes before the first frame."""
        return b""

    async def add(self, result: FrameResult) -> bytes:
        """One PNG entry."""
        self._times.append((result.source, result.time_s))
        return self._zip.file(f"depth_{result.position:06d}.png", result.data)

    async def finish(self) -> bytes:
        """frames.csv and the central directory."""
        return self._zip.file("frames.csv", _timeline(self._times).encode()) + self._zip.close()

    async def abort(self) -> None:
        """Nothing to release."""


class NpzOutput:
    """An (N, H, W) depth stack in an .npz, written as frames arrive, then timestamps and frame indices."""

    worker_format = "npy"

    def __init__(self, frames: int, height: int, width: int, dtype: str) -> None:
        self._zip = ZipStream()
        self._shape = (frames, height, width)
        self._dtype = np.dtype(dtype).newbyteorder("<")
        self._times: list[float] = []
        self._sources: list[int] = []

    def start(self) -> bytes:
        """The stack's entry header and .npy header (its shape known from the probe)."""
        header = io.BytesIO()
        np.lib.format.write_array_header_2_0(
            header, {"descr": np.lib.format.dtype_to_descr(self._dtype), "fortran_order": False, "shape": self._shape}
        )
        return self._zip.begin("depth.npy") + self._zip.data(header.getvalue())

    def _convert(self, data: bytes) -> bytes:
        depth = read_depth(data, self._shape[1], self._shape[2])
        return depth.astype(self._dtype).tobytes() if self._dtype != depth.dtype else depth.tobytes()

    async def add(self, result: FrameResult) -> bytes:
        """The frame's depth, converted to the stack's dtype (in a thread for all but tiny frames)."""
        self._times.append(result.time_s)
        self._sources.append(result.source)
        small = self._shape[1] * self._shape[2] <= MAX_CONVERT_ON_LOOP
        converted = self._convert(result.data) if small else await asyncio.to_thread(self._convert, result.data)
        return self._zip.data(converted)

    async def finish(self) -> bytes:
        """Close the stack; timestamps.npy, frames.npy and the central directory."""
        if len(self._times) != self._shape[0]:
            raise VideoError(500, "internal", f"depth stack holds {len(self._times)} of {self._shape[0]} frames")
        tail = [self._zip.end()]
        for name, values in (
            ("timestamps.npy", np.asarray(self._times, "<f8")),
            ("frames.npy", np.asarray(self._sources, "<i8")),
        ):
            buffer = io.BytesIO()
            np.save(buffer, values)
            tail.append(self._zip.file(name, buffer.getvalue()))
        tail.append(self._zip.close())
        return b"".join(tail)

    async def abort(self) -> None:
        """Nothing to release."""
