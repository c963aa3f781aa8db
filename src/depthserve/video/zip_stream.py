"""A zip written front to back, for replies streamed as they are made: stored entries, zip64 when needed.

Python's zipfile writes to an unseekable stream too, but every entry then gets a data descriptor with
zeroed sizes in its local header. Here an entry whose bytes are known (a PNG frame) gets its sizes and
CRC in the local header, so a client can follow the stream entry by entry (`depthserve predict`
counts frames that way); only an entry written piece by piece (the .npz depth stack) carries a data
descriptor. Entries are stored, not deflated: PNGs are compressed already, and depth stacks barely
deflate. Central directory and end records (zip64 past 65,535 entries or 4 GiB) close the stream.
"""

from __future__ import annotations

import struct
import time
import zlib
from dataclasses import dataclass

_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END = struct.Struct("<IHHHHIIH")
_END64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<IIQI")
_DESCRIPTOR64 = struct.Struct("<IIQQ")
_MAX32 = 0xFFFFFFFF
_MAX16 = 0xFFFF
_STREAMED = 0x08  # general-purpose flag bit 3: sizes and CRC follow the data
_VERSION = 45  # 4.5: zip64 (readers need no more for stored entries)
LOCAL_HEADER = _LOCAL.size  # 30 bytes, then the name and the extra field


def _dos_time(now: float) -> tuple[int, int]:
    t = time.localtime(now)
    return (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2), ((t.tm_year - 1980) << 9) | (
        t.tm_mon << 5
    ) | t.tm_mday


@dataclass
class _Entry:
    name: bytes
    offset: int
    flags: int
    crc: int = 0
    size: int = 0


class ZipStream:
    """Builds a zip as a sequence of byte strings; the caller sends each as it is returned."""

    def __init__(self, now: float | None = None) -> None:
        self._time, self._date = _dos_time(time.time() if now is None else now)
        self._entries: list[_Entry] = []
        self._offset = 0
        self._open: _Entry | None = None

    def _out(self, data: bytes) -> bytes:
        self._offset += len(data)
        return data

    def _local(self, entry: _Entry, crc: int, size: int) -> bytes:
        zip64 = size >= _MAX32
        extra = struct.pack("<HHQQ", 1, 16, size, size) if zip64 else b""
        small = _MAX32 if zip64 else size
        header = _LOCAL.pack(
            0x04034B50, _VERSION, entry.flags, 0, self._time, self._date, crc, small, small, len(entry.name), len(extra)
        )
        return header + entry.name + extra

    def file(self, name: str, data: bytes) -> bytes:
        """One whole entry: local header (sizes and CRC in it) and data."""
        assert self._open is None, "an entry is still being written"
        entry = _Entry(name.encode(), self._offset, 0, zlib.crc32(data), len(data))
        self._entries.append(entry)
        return self._out(self._local(entry, entry.crc, entry.size) + data)

    def begin(self, name: str) -> bytes:
        """Start an entry written piece by piece (`data`, then `end`); its sizes follow it."""
        assert self._open is None, "an entry is still being written"
        entry = self._open = _Entry(name.encode(), self._offset, _STREAMED)
        self._entries.append(entry)
        extra = struct.pack("<HHQQ", 1, 16, 0, 0)  # zip64 sizes, so the descriptor may carry 8-byte ones
        header = _LOCAL.pack(
            0x04034B50, _VERSION, entry.flags, 0, self._time, self._date, 0, _MAX32, _MAX32, len(entry.name), len(extra)
        )
        return self._out(header + entry.name + extra)

    def data(self, piece: bytes) -> bytes:
        """More bytes of the open entry."""
        entry = self._open
        assert entry is not None, "no entry is open"
        entry.crc = zlib.crc32(piece, entry.crc)
        entry.size += len(piece)
        return self._out(piece)

    def end(self) -> bytes:
        """Close the open entry with its data descriptor (zip64 sizes)."""
        entry = self._open
        assert entry is not None, "no entry is open"
        self._open = None
        return self._out(_DESCRIPTOR64.pack(0x08074B50, entry.crc, entry.size, entry.size))

    def _central(self, entry: _Entry) -> bytes:
        wide = entry.size >= _MAX32 or bool(entry.flags & _STREAMED)  # begin() wrote zip64 sizes: say them here too
        fields = [entry.size, entry.size] if wide else []
        if entry.offset >= _MAX32:
            fields.append(entry.offset)
        extra = struct.pack(f"<HH{len(fields)}Q", 1, 8 * len(fields), *fields) if fields else b""
        size = _MAX32 if wide else entry.size
        offset = min(entry.offset, _MAX32)
        header = _CENTRAL.pack(
            0x02014B50,
            _VERSION,
            _VERSION,
            entry.flags,
            0,
            self._time,
            self._date,
            entry.crc,
            size,
            size,
            len(entry.name),
            len(extra),
            0,
            0,
            0,
            0,
            offset,
        )
        return header + entry.name + extra

    def close(self) -> bytes:
        """The central directory and end records: after these the zip is complete."""
        assert self._open is None, "an entry is still being written"
        start = self._offset
        directory = b"".join(self._central(entry) for entry in self._entries)
        size, count = len(directory), len(self._entries)
        tail = b""
        if count >= _MAX16 or start >= _MAX32 or size >= _MAX32:
            end64_at = start + size
            tail = _END64.pack(0x06064B50, 44, _VERSION, _VERSION, 0, 0, count, count, size, start)
            tail += _LOCATOR64.pack(0x07064B50, 0, end64_at, 1)
        end = _END.pack(
            0x06054B50, 0, 0, min(count, _MAX16), min(count, _MAX16), min(size, _MAX32), min(start, _MAX32), 0
        )
        return self._out(directory + tail + end)
