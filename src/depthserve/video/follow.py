"""Count the frames of a video reply as its bytes arrive, so a client can show progress while it downloads.

zip: every local header states its entry's size (zip_stream.py), so entries are followed one by one
and each `depth_*.png` counts. npz: the depth stack's bytes past its headers, over one frame's size.
mp4: fragments carry about a second each, so only the end is exact: frames are counted once it is in.
"""

from __future__ import annotations

import struct

from depthserve.video.zip_stream import LOCAL_HEADER

_LOCAL_SIG = b"PK\x03\x04"
_NPY_PREFIX = 10  # \x93NUMPY, version 2.0, 4-byte header length


class FrameCounter:
    """Feed it the reply's bytes in order; `frames` says how many frames are complete so far."""

    def __init__(self, output: str, frame_bytes: int = 0) -> None:
        self.output = output
        self.frames = 0
        self._frame_bytes = frame_bytes  # npz: height * width * itemsize
        self._buffer = bytearray()
        self._skip = 0  # zip: bytes of the current entry still to pass
        self._stack_start: int | None = None  # npz: offset of the first depth value
        self._seen = 0

    def feed(self, data: bytes) -> int:
        """Take more bytes; give the frames complete so far."""
        self._seen += len(data)
        if self.output == "zip":
            self._follow_zip(data)
        elif self.output == "npz":
            self._follow_npz(data)
        return self.frames

    def _follow_zip(self, data: bytes) -> None:
        view = memoryview(data)
        if self._skip:
            taken = min(self._skip, len(view))
            self._skip -= taken
            view = view[taken:]
        self._buffer += view
        while len(self._buffer) >= LOCAL_HEADER and self._buffer[:4] == _LOCAL_SIG:
            size, name_len, extra_len = struct.unpack_from("<I4xHH", self._buffer, 18)
            head = LOCAL_HEADER + name_len + extra_len
            if len(self._buffer) < head:
                return
            name = bytes(self._buffer[LOCAL_HEADER : LOCAL_HEADER + name_len])
            if name.startswith(b"depth_") and name.endswith(b".png"):
                self.frames += 1
            rest = len(self._buffer) - head
            if rest >= size:
                del self._buffer[: head + size]
            else:
                self._skip = size - rest
                self._buffer.clear()
        if len(self._buffer) >= 4 and self._buffer[:4] != _LOCAL_SIG:
            self._buffer.clear()  # the central directory: no frames follow

    def _follow_npz(self, data: bytes) -> None:
        if self._stack_start is None:
            self._buffer += data
            if len(self._buffer) < LOCAL_HEADER:
                return
            name_len, extra_len = struct.unpack_from("<HH", self._buffer, 26)
            npy_at = LOCAL_HEADER + name_len + extra_len
            if len(self._buffer) < npy_at + _NPY_PREFIX:
                return
            (header_len,) = struct.unpack_from("<I", self._buffer, npy_at + 8)
            self._stack_start = npy_at + _NPY_PREFIX + header_len
            self._buffer.clear()
        if self._frame_bytes:
            self.frames = max(0, self._seen - self._stack_start) // self._frame_bytes

    def finished(self, total: int) -> int:
        """The reply ended complete: every frame is in (what mp4 can only say now)."""
        self.frames = total
        return total
