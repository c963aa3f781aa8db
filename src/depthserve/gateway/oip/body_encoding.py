"""gzip and deflate request bodies (Content-Encoding) and responses (Accept-Encoding), with a size cap.

The cap on the decompressed size is the body limit itself, so a small compressed upload cannot
inflate past what the gateway would accept uncompressed (a zip bomb gets 413, not the memory).
"""

from __future__ import annotations

import zlib

from depthserve.gateway.errors import GatewayError

ENCODINGS = ("gzip", "deflate")
_CHUNK = 1024 * 1024
MIN_COMPRESS = 1024  # smaller responses gain nothing worth the CPU
MAX_MEMBERS = 64  # concatenated gzip files: a few are real, thousands of empty ones only cost the event loop
_GZIP_MAGIC = b"\x1f\x8b"


def _decoder(encoding: str, raw_deflate: bool = False) -> zlib._Decompress:
    if encoding == "gzip":
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    # HTTP "deflate" means the zlib format; some clients send a bare deflate stream, so accept both.
    return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)


def _inflate(body: bytes, encoding: str, limit: int, raw_deflate: bool) -> bytes:
    """Decompress every gzip member (RFC 1952 allows several) within `limit`; anything else after the end is refused."""
    parts: list[bytes] = []
    size = members = 0
    data = body
    while True:
        members += 1
        if members > MAX_MEMBERS:
            raise GatewayError(400, "invalid_request", f"{encoding} body has more than {MAX_MEMBERS} members")
        decoder = _decoder(encoding, raw_deflate)
        while data and not decoder.eof:
            part = decoder.decompress(data, _CHUNK)
            size += len(part)
            if size > limit:
                raise GatewayError(
                    413, "body_too_large", f"{encoding} body inflates past the {limit}-byte limit on request bodies"
                )
            parts.append(part)
            data = decoder.unconsumed_tail
        if not decoder.eof:
            raise GatewayError(400, "invalid_request", f"{encoding} body is truncated")
        data = decoder.unused_data
        if not data:
            return b"".join(parts)
        if encoding != "gzip" or not data.startswith(_GZIP_MAGIC):
            raise GatewayError(
                400, "invalid_request", f"{len(data)} bytes of trailing data after the end of the {encoding} body"
            )


def decode_body(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """Undo a request's Content-Encoding (identity, gzip or deflate), refusing more than `limit` bytes out."""
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ENCODINGS:
        raise GatewayError(
            415, "unsupported_media_type", f"Content-Encoding {encoding!r} not supported; use gzip or deflate"
        )
    try:
        return _inflate(body, encoding, limit, raw_deflate=False)
    except zlib.error as exc:
        if encoding == "deflate":
            try:
                return _inflate(body, encoding, limit, raw_deflate=True)
            except zlib.error:
                pass
        raise GatewayError(400, "invalid_request", f"body is not valid {encoding}: {exc}") from None


def choose_encoding(accept_encoding: str | None) -> str | None:
    """Pick gzip or deflate from an Accept-Encoding header (q=0 means refused), or None for identity."""
    if not accept_encoding:
        return None
    best: tuple[float, str] | None = None
    for item in accept_encoding.split(","):
        name, _, params = item.strip().partition(";")
        name = name.strip().lower()
        quality = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                quality = float(params[2:])
            except ValueError:
                quality = 0.0
        if name in ENCODINGS and quality > 0 and (best is None or quality > best[0]):
            best = (quality, name)
    return None if best is None else best[1]


def encode_body(body: bytes, encoding: str) -> bytes:
    """Compress a response body with gzip or deflate (zlib format, as HTTP means it); level 1, for speed."""
    if encoding == "gzip":
        compressor = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    else:
        compressor = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS)
    return compressor.compress(body) + compressor.flush()
