"""A multipart body streamed to disk as it arrives: each file part written once, straight into its own file.

Starlette's form parser spools file parts to temporary files of its own, so a video part was written
twice (there, then copied). Here python-multipart's streaming parser hands each part's bytes to this
module, which gathers them and appends them to `FOLDER/NAME` from a thread, a MiB at a time; small
text parts (`fields`) stay in memory, bounded. Part names outside `files` and `fields`, a part given
twice or too many parts are refused (400/413), like a part too large for memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from python_multipart.multipart import MultipartParser, parse_options_header

from depthserve.gateway.errors import GatewayError

WRITE_BYTES = 1 << 20  # a file part's bytes gathered before one write
MAX_FIELD_BYTES = 64 * 1024


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as out:
        out.write(data)


@dataclass
class _Part:
    name: str = ""
    header_field: bytearray = field(default_factory=bytearray)
    header_value: bytearray = field(default_factory=bytearray)
    disposition: bytes = b""
    data: bytearray = field(default_factory=bytearray)
    size: int = 0


class PartsToFiles:
    """Feed it the body's bytes in order (`feed`), then `finish`; `files` and `fields` hold what came."""

    def __init__(
        self,
        boundary: bytes,
        folder: Path,
        files: Collection[str],
        fields: Collection[str],
        max_parts: int,
        on_written: Callable[[int], None] = lambda total: None,
    ) -> None:
        self.files: dict[str, Path] = {}
        self.fields: dict[str, bytes] = {}
        self._folder = folder
        self._file_names, self._field_names = set(files), set(fields)
        self._max_parts = max_parts
        self._on_written = on_written  # told the bytes written to files so far, before each write
        self._parts = 0
        self._written = 0
        self._part: _Part | None = None
        self._ready: list[tuple[Path, bytes]] = []
        self._error: GatewayError | None = None
        self._ended = False
        callbacks = {
            "on_part_begin": self._begin,
            "on_header_field": lambda d, s, e: self._now().header_field.extend(d[s:e]),
            "on_header_value": lambda d, s, e: self._now().header_value.extend(d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_done,
            "on_part_data": self._data,
            "on_part_end": self._part_end,
            "on_end": self._end,
        }
        self._parser = MultipartParser(boundary, callbacks)  # type: ignore[arg-type]

    def _now(self) -> _Part:
        assert self._part is not None
        return self._part

    def _fail(self, error: GatewayError) -> None:
        self._error = self._error or error

    def _begin(self) -> None:
        self._parts += 1
        if self._parts > self._max_parts:
            self._fail(GatewayError(413, "too_many_parts", f"more than {self._max_parts} parts"))
        self._part = _Part()

    def _header_end(self) -> None:
        part = self._now()
        if bytes(part.header_field).strip().lower() == b"content-disposition":
            part.disposition = bytes(part.header_value)
        part.header_field.clear()
        part.header_value.clear()

    def _headers_done(self) -> None:
        part = self._now()
        _, options = parse_options_header(part.disposition)
        part.name = options.get(b"name", b"").decode("latin-1")
        if part.name not in self._file_names | self._field_names:
            known = ", ".join(sorted(self._file_names | self._field_names))
            self._fail(GatewayError(400, "invalid_request", f"unexpected multipart part {part.name!r}; send {known}"))
        elif part.name in self.files or part.name in self.fields:
            self._fail(GatewayError(400, "invalid_request", f"multipart part {part.name!r} given twice"))
        elif part.name in self._file_names:
            self.files[part.name] = self._folder / part.name

    def _data(self, data: bytes, start: int, end: int) -> None:
        part = self._now()
        part.data += data[start:end]
        part.size += end - start
        if part.name in self._field_names and part.size > MAX_FIELD_BYTES:
            self._fail(GatewayError(413, "part_too_large", f"part {part.name!r} exceeds {MAX_FIELD_BYTES} bytes"))
        elif part.name in self.files and len(part.data) >= WRITE_BYTES:
            self._ready.append((self.files[part.name], bytes(part.data)))
            part.data.clear()

    def _part_end(self) -> None:
        part = self._now()
        if part.name in self.files:
            self._ready.append((self.files[part.name], bytes(part.data)))
        elif part.name in self._field_names:
            self.fields[part.name] = bytes(part.data)
        self._part = None

    def _end(self) -> None:
        self._ended = True

    async def feed(self, chunk: bytes) -> None:
        """Parse more of the body and write what it completed; GatewayError on a part refused."""
        try:
            self._parser.write(chunk)
        except Exception as exc:  # noqa: BLE001 - python-multipart raises several types for malformed bodies
            raise GatewayError(400, "invalid_request", f"malformed multipart body: {exc}") from None
        if self._error is not None:
            raise self._error
        ready, self._ready = self._ready, []
        for path, data in ready:
            self._written += len(data)
            self._on_written(self._written)
            await asyncio.to_thread(_append, path, data)

    def finish(self) -> None:
        """The body ended: 400 if the multipart did not (a body cut short)."""
        if not self._ended:
            raise GatewayError(400, "invalid_request", "malformed multipart body: it ends before its closing boundary")
