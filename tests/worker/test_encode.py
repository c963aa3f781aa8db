"""A reply is measured once encoded: one too large to send is a clear, permanent refusal, not gRPC's "exhausted"."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from depthserve.codec import ReplyTooLarge
from depthserve.protocol.depth_api import DepthInputs
from depthserve.worker.encode import encode_response
from depthserve.worker.errors import PERMANENT_CODES, status_for
from depthserve.worker.runners.base import Prepared


def noisy(fmt: str, size: int = 256) -> tuple[dict[str, np.ndarray], Prepared]:
    """Outputs that do not compress (uniform noise), so a PNG is nearly as large as the raw samples."""
    depth = np.random.default_rng(5).uniform(0.5, 60.0, (size, size)).astype(np.float32)
    outputs = {"depth": depth, "mask": np.ones((size, size), bool)}
    return outputs, Prepared(DepthInputs(image=b"", output_format=fmt), size, size)


@pytest.mark.parametrize("fmt", ["png16", "npy", "raw"])
def test_a_reply_over_the_limit_is_refused_after_encoding(fmt: str) -> None:
    outputs, prepared = noisy(fmt)
    size = encode_response("m", "r", outputs, prepared).ByteSize()
    assert size > 100_000  # 256 x 256 samples of noise
    assert encode_response("m", "r", outputs, prepared, size).ByteSize() == size  # exactly at the limit: sent
    with pytest.raises(ReplyTooLarge, match=f"encoded {fmt} reply takes .* MiB, over the"):
        encode_response("m", "r", outputs, prepared, size - 1)


def test_reply_too_large_is_out_of_range_and_permanent() -> None:
    code, message = status_for(ReplyTooLarge("the npy reply ... over the 64 MiB limit"))
    assert code == grpc.StatusCode.OUT_OF_RANGE and "64 MiB" in message
    assert code in PERMANENT_CODES and grpc.StatusCode.RESOURCE_EXHAUSTED not in PERMANENT_CODES
