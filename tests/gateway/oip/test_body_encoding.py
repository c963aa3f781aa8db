"""gzip and deflate request bodies within the body limit, and compressed replies when asked."""

from __future__ import annotations

import gzip
import zlib

import pytest

from depthserve.gateway.errors import GatewayError
from depthserve.gateway.oip.body_encoding import MAX_MEMBERS, choose_encoding, decode_body, encode_body


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_bodies_round_trip(encoding: str) -> None:
    body = b'{"inputs": []}' * 100
    assert decode_body(encode_body(body, encoding), encoding, 10_000) == body
    other = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    assert decode_body(other, encoding.upper(), 10_000) == body


def test_raw_deflate_streams_are_accepted_too() -> None:
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = compressor.compress(b"hello" * 10) + compressor.flush()
    assert decode_body(raw, "deflate", 1000) == b"hello" * 10


def test_a_zip_bomb_is_refused_at_the_body_limit() -> None:
    bomb = gzip.compress(b"\x00" * (64 * 1024 * 1024))
    assert len(bomb) < 100_000
    with pytest.raises(GatewayError) as caught:
        decode_body(bomb, "gzip", 1024 * 1024)
    assert caught.value.status == 413


@pytest.mark.parametrize(
    ("body", "encoding", "status"),
    [(b"not gzip", "gzip", 400), (gzip.compress(b"x" * 100, mtime=0)[:20], "gzip", 400), (b"x", "br", 415)],
)
def test_broken_or_unknown_encodings_get_a_clear_status(body: bytes, encoding: str, status: int) -> None:
    with pytest.raises(GatewayError) as caught:
        decode_body(body, encoding, 1000)
    assert caught.value.status == status


def test_accept_encoding_picks_the_preferred_known_one() -> None:
    assert choose_encoding("gzip") == "gzip"
    assert choose_encoding("br, deflate;q=0.5, gzip;q=0.9") == "gzip"
    assert choose_encoding("gzip;q=0, identity") is None
    assert choose_encoding(None) is None


def test_every_gzip_member_is_decoded_within_the_limit() -> None:
    body = gzip.compress(b"a" * 100) + gzip.compress(b"b" * 10)
    assert decode_body(body, "gzip", 1000) == b"a" * 100 + b"b" * 10
    with pytest.raises(GatewayError) as caught:
        decode_body(body, "gzip", 105)  # the limit counts every member together
    assert caught.value.status == 413


@pytest.mark.parametrize(
    ("body", "encoding", "message"),
    [
        (gzip.compress(b"x" * 100, mtime=0) + b"garbage", "gzip", "7 bytes of trailing data"),
        (zlib.compress(b"x" * 100) + b"\x00", "deflate", "1 bytes of trailing data"),
        (gzip.compress(b"x", mtime=0) + gzip.compress(b"y", mtime=0)[:10], "gzip", "truncated"),
        (gzip.compress(b"x", mtime=0) + b"\x1f\x8bnot a member", "gzip", "not valid gzip"),
        (gzip.compress(b"") * (MAX_MEMBERS + 1), "gzip", f"more than {MAX_MEMBERS} members"),
    ],
)
def test_trailing_garbage_and_endless_members_are_refused(body: bytes, encoding: str, message: str) -> None:
    with pytest.raises(GatewayError, match=message) as caught:
        decode_body(body, encoding, 10_000)
    assert caught.value.status == 400
