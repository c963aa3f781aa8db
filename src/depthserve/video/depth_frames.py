"""Raw sensor depth for a video's frames, uploaded beside it: a zip of 16-bit PNGs (mm) or an .npz (metres).

zip: one PNG per file frame, taken in name order (`000.png`, `001.png`, ...); each is passed to the
worker as it is (the worker decodes and checks it, as for `/v1/depth`). npz: a `depth` array (or the
only array) of shape (frames, H, W), read one frame at a time as the video advances, sent as FP32
metres. Either way there must be exactly one depth frame per video frame (400 otherwise). Blocking:
`frame` runs in a thread.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO

import numpy as np

from depthserve.video.errors import VideoError
from depthserve.video.probe import VideoInfo

_FLOATS = ("<f2", "<f4", "<f8")


def _bad(message: str) -> VideoError:
    return VideoError(400, "invalid_depth", message)


class DepthFrames:
    """Gives the raw depth of file frame `source`, frames asked in increasing order."""

    def __init__(self, path: Path, info: VideoInfo) -> None:
        try:
            self._zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise _bad(f"depth part is neither a zip of PNGs nor an .npz: {exc}") from None
        self._info = info
        self._stack: IO[bytes] | None = None
        self._next = 0
        names = [n for n in self._zip.namelist() if not n.endswith("/")]
        if any(name.endswith(".npy") for name in names):
            self._open_stack(names)
            self._pngs: list[zipfile.ZipInfo] = []
        else:
            self._pngs = sorted(
                (self._zip.getinfo(n) for n in names if n.lower().endswith(".png")), key=lambda i: i.filename
            )
            if len(self._pngs) != info.frames:
                raise _bad(f"depth zip holds {len(self._pngs)} PNG frames; the video has {info.frames}")
            limit = 8 * info.width * info.height + (1 << 20)
            big = next((i for i in self._pngs if i.file_size > limit), None)
            if big is not None:
                raise _bad(f"depth frame {big.filename} unpacks to {big.file_size} bytes, too large for its frame")

    def _open_stack(self, names: list[str]) -> None:
        member = "depth.npy" if "depth.npy" in names else next(n for n in names if n.endswith(".npy"))
        stack = self._zip.open(member)
        try:
            version = np.lib.format.read_magic(stack)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(stack)
        except ValueError as exc:
            raise _bad(f"depth .npz member {member} is not a readable .npy: {exc}") from None
        info = self._info
        if dtype.str not in _FLOATS or fortran or tuple(shape) != (info.frames, info.height, info.width):
            raise _bad(
                f"depth stack must be float (frames, height, width) = ({info.frames}, {info.height}, {info.width}), "
                f"got {dtype} {tuple(shape)}"
            )
        self._stack, self._dtype = stack, dtype

    def frame(self, source: int) -> bytes | np.ndarray:
        """The raw depth of file frame `source`: PNG bytes (mm), or an FP32 (H, W) array in metres."""
        if self._stack is None:
            return self._zip.read(self._pngs[source])
        size = self._info.height * self._info.width * self._dtype.itemsize
        while self._next < source:  # frames skipped by the stride are read past, never held
            self._stack.read(size)
            self._next += 1
        data = self._stack.read(size)
        self._next += 1
        if len(data) != size:
            raise _bad(f"depth stack ends before frame {source}")
        return np.frombuffer(data, self._dtype).reshape(self._info.height, self._info.width).astype(np.float32)

    def close(self) -> None:
        """Close the file."""
        if self._stack is not None:
            self._stack.close()
        self._zip.close()
