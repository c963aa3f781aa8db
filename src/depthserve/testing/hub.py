"""A stand-in for the Hugging Face hub on loopback: `resolve` redirects to a blob served with ranges."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/main/(?P<file>[^/]+)")
_RANGE = re.compile(r"bytes=(\d+)-")


@dataclass
class FakeHub:
    """Files by (repo, name); what was asked for; faults to inject into the next blob answers."""

    files: dict[tuple[str, str], bytes]
    requests: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    cut_after: int | None = None  # the next blob answer ends after this many body bytes
    advertised_sha: str | None = None  # an X-Linked-Etag to send instead of the true SHA-256
    url: str = ""

    def blob(self, sha: str) -> bytes | None:
        """The file whose SHA-256 is `sha`, if any."""
        return next((data for data in self.files.values() if hashlib.sha256(data).hexdigest() == sha), None)


@contextmanager
def fake_hub(files: dict[tuple[str, str], bytes]) -> Iterator[FakeHub]:
    """Serve `files` at http://127.0.0.1:PORT as the hub does, until the block ends."""
    hub = FakeHub(files)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            """Stay quiet: tests read `hub.requests` instead."""

        def do_GET(self) -> None:  # noqa: N802 - the base class's naming
            """Redirect `resolve` to its blob (with the LFS headers), or serve a blob's bytes."""
            hub.requests.append((self.path, self.headers.get("Range")))
            resolved = _RESOLVE.fullmatch(self.path)
            if resolved:
                data = hub.files.get((resolved["repo"], resolved["file"]))
                if data is None:
                    return self._empty(404)
                sha = hashlib.sha256(data).hexdigest()
                self.send_response(302)
                self.send_header("Location", f"/blobs/{sha}")
                self.send_header("X-Linked-Etag", f'"{hub.advertised_sha or sha}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            blob = hub.blob(self.path.removeprefix("/blobs/"))
            if blob is None:
                return self._empty(404)
            return self._serve(blob)

        def _serve(self, data: bytes) -> None:
            wanted = _RANGE.fullmatch(self.headers.get("Range", ""))
            start = int(wanted[1]) if wanted else 0
            if start >= len(data) and wanted:
                return self._empty(416)
            self.send_response(206 if wanted else 200)
            if wanted:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            body = data[start:]
            if hub.cut_after is not None:  # a connection lost mid-download
                body, hub.cut_after = body[: hub.cut_after], None
                self.close_connection = True
            self.wfile.write(body)
            return None

        def _empty(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler
