"""Reply sizes per output format, and the refusal that names the limit and the largest size that fits."""

from __future__ import annotations

import pytest

from depthserve.codec import ReplyTooLarge, check_encoded_reply, check_reply_size, reply_bytes
from depthserve.codec.reply_size import REPLY_OVERHEAD, largest_fitting

MIB = 1024 * 1024
LIMIT = 64 * MIB


def test_fixed_size_formats_take_bytes_per_pixel() -> None:
    assert reply_bytes(100, 10, "npy", False) == 4_000 + REPLY_OVERHEAD
    assert reply_bytes(100, 10, "raw", False) == 5_000 + REPLY_OVERHEAD  # FP32 depth + BOOL mask
    assert reply_bytes(100, 10, "raw", True) == 17_000 + REPLY_OVERHEAD  # + FP32 x3 points
    assert reply_bytes(100, 10, "ply", True) == 15_000 + REPLY_OVERHEAD  # xyz + rgb per vertex


@pytest.mark.parametrize("fmt", ["png16", "preview"])
def test_compressed_formats_are_measured_only_once_encoded(fmt: str) -> None:
    assert reply_bytes(8000, 5000, fmt, False) is None
    check_reply_size(8000, 5000, fmt, False, LIMIT)  # passes: the worker checks the encoded size


def test_npy_over_16_7_megapixels_is_refused_with_the_limit_and_largest_fitting_size() -> None:
    with pytest.raises(ReplyTooLarge) as caught:
        check_reply_size(4800, 3600, "npy", False, LIMIT)  # 17.3 MP
    message = str(caught.value)
    assert "64 MiB limit" in message and "4800x3600" in message
    assert "largest npy reply at this aspect ratio is for 4727x3545 pixels" in message


def test_the_largest_fitting_size_fits_and_one_more_row_does_not() -> None:
    assert largest_fitting(4096, 4096, 4, LIMIT) == (4093, 4093)
    check_reply_size(4093, 4093, "npy", False, LIMIT)
    check_reply_size(4096, 4092, "npy", False, LIMIT)  # (64 MiB - overhead) / 4 bytes = 4096 x 4092 exactly
    with pytest.raises(ReplyTooLarge):
        check_reply_size(4096, 4093, "npy", False, LIMIT)


def test_oip_intrinsics_and_ply_are_refused_from_their_own_sizes() -> None:
    check_reply_size(2000, 1900, "raw", False, LIMIT)  # 3.8 MP of depth + mask fits
    with pytest.raises(ReplyTooLarge, match="raw with points reply"):
        check_reply_size(2000, 2000, "raw", True, LIMIT)  # 4 MP x 17 bytes does not
    with pytest.raises(ReplyTooLarge, match="ply reply"):
        check_reply_size(2400, 2000, "ply", True, LIMIT)


def test_an_encoded_reply_over_the_limit_is_refused() -> None:
    check_encoded_reply(LIMIT, "png16", LIMIT)
    with pytest.raises(ReplyTooLarge, match="encoded png16 reply takes 64.0 MiB, over the 64 MiB limit"):
        check_encoded_reply(LIMIT + 1, "png16", LIMIT)
