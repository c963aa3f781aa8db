"""Choose the output format from `?format=` or the Accept header, the same way in gateway and worker."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from depthserve.codec.errors import UnsupportedFormat

# name -> (media type, file extension). "raw" is the OIP tensor form: little-endian float32 bytes.
OUTPUT_FORMATS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "npy": ("application/x-npy", ".npy"),
        "png16": ("image/png", ".png"),
        "preview": ("image/png", ".png"),
        "ply": ("application/x-ply", ".ply"),
        "raw": ("application/octet-stream", ".bin"),
    }
)
DEFAULT_FORMAT = "npy"

# Exact media types a client may ask for; image/png with a `preview` parameter selects "preview".
_BY_MEDIA_TYPE: Mapping[str, str] = MappingProxyType(
    {
        "application/x-npy": "npy",
        "application/npy": "npy",
        "image/png": "png16",
        "application/x-ply": "ply",
        "model/ply": "ply",
        "application/ply": "ply",
        "application/octet-stream": "raw",
    }
)
# A wildcard means "any of these", in order of preference, skipping those refused with q=0.
_BY_WILDCARD: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "*/*": ("npy", "png16", "ply", "raw", "preview"),
        "application/*": ("npy", "ply", "raw"),
        "image/*": ("png16", "preview"),
        "model/*": ("ply",),
    }
)
_FALSE = frozenset({"0", "false", "no", "off"})


def _unsupported(what: str) -> UnsupportedFormat:
    """Build the error that lists every format, so a client can fix its request from the message."""
    names = ", ".join(OUTPUT_FORMATS)
    return UnsupportedFormat(
        f"unsupported output format {what}; supported: format={names} or Accept: application/x-npy, "
        "image/png, image/png;preview, application/x-ply (model/ply), application/octet-stream"
    )


def _parse_range(item: str) -> tuple[str, float, tuple[str, ...]] | None:
    """Turn one Accept entry into (media range, q, candidate formats), or None when it is malformed."""
    media, *params = [p.strip() for p in item.split(";")]
    media = media.lower()
    if "/" not in media:
        return None
    q, preview = 1.0, False
    for param in params:
        key, _, value = param.partition("=")
        key, value = key.strip().lower(), value.strip().strip('"').lower()
        if key == "q":
            try:
                q = float(value)
            except ValueError:
                return None
            if not 0.0 <= q <= 1.0:
                return None
        elif key == "preview":
            preview = value not in _FALSE
    if media in _BY_WILDCARD:
        return media, q, _BY_WILDCARD[media]
    fmt = _BY_MEDIA_TYPE.get(media)
    if fmt == "png16" and preview:
        fmt = "preview"
    return media, q, (fmt,) if fmt else ()


def format_from_accept(accept: str | None, format_param: str | None) -> str:
    """Resolve the output format name: `?format=` wins, then the best Accept match, else npy."""
    if format_param is not None and format_param.strip():
        name = format_param.strip().lower()
        if name not in OUTPUT_FORMATS:
            raise _unsupported(f"{format_param.strip()!r}")
        return name
    if accept is None or not accept.strip():
        return DEFAULT_FORMAT
    ranges = [r for r in (_parse_range(item) for item in accept.split(",") if item.strip()) if r is not None]
    refused = {fmt for media, q, fmts in ranges if q == 0.0 and "*" not in media for fmt in fmts}
    best: tuple[float, int, str] | None = None
    for media, q, fmts in ranges:
        usable = [fmt for fmt in fmts if fmt not in refused]
        if q == 0.0 or not usable:
            continue
        # Higher q wins; at equal q an exact media type beats a wildcard, then header order.
        rank = (q, 0 if "*" in media else 1, usable[0])
        if best is None or rank[:2] > best[:2]:
            best = rank
    if best is None:
        raise _unsupported(f"for Accept: {accept.strip()!r}")
    return best[2]
