"""The binary tensor extension: bodies split into JSON + per-input bytes, and replies joined back."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from depthserve.gateway.oip.binary import join_body, slice_inputs, split_body
from depthserve.protocol.tensors import TensorError


def binary_request(header: dict[str, Any], *chunks: bytes) -> tuple[bytes, str]:
    """Build a body as tritonclient does: JSON header, then the raw tensors, and the header's length."""
    text = json.dumps(header).encode()
    return text + b"".join(chunks), str(len(text))


def test_inputs_get_their_own_bytes_in_order() -> None:
    first = np.arange(6, dtype=np.float32).tobytes()
    second = b"\x01\x02\x03"
    header = {
        "inputs": [
            {"name": "a", "datatype": "FP32", "shape": [2, 3], "parameters": {"binary_data_size": len(first)}},
            {"name": "j", "datatype": "INT32", "shape": [1], "data": [7]},
            {"name": "b", "datatype": "UINT8", "shape": [3], "parameters": {"binary_data_size": 3}},
        ]
    }
    body, length = binary_request(header, first, second)
    doc, binary = split_body(body, length)
    assert doc == header
    slices = slice_inputs(doc["inputs"], binary)
    assert slices[1] is None
    assert slices[0] is not None and bytes(slices[0]) == first
    assert slices[2] is not None and bytes(slices[2]) == second


def test_plain_json_body_has_no_binary_part() -> None:
    doc, binary = split_body(b'{"inputs": []}', None)
    assert doc == {"inputs": []} and len(binary) == 0


@pytest.mark.parametrize(
    ("body", "length", "message"),
    [
        (b'{"inputs": []}', "99", "only 14 bytes"),
        (b'{"inputs": []}', "-3", "byte count"),
        (b'{"inputs": [}', None, "not valid JSON"),
        (b"[1, 2]", None, "JSON object"),
        (b"\xff\xfe", None, "not valid JSON"),
        (b"[" * 100_000, None, "nested too deeply"),
        (b'{"a": ' + b"1" * 5000 + b"}", None, "not valid JSON"),  # past Python's int digit limit
        (b"{}", "\u00b2", "byte count"),  # a digit to isdigit(), not to int()
        (b"{}", "9" * 5000, "byte count"),
        (b"{}", "1" * 19, "byte count"),
    ],
)
def test_broken_headers_are_refused_with_a_reason(body: bytes, length: str | None, message: str) -> None:
    with pytest.raises(TensorError, match=message):
        split_body(body, length)


def test_sizes_that_do_not_add_up_are_refused() -> None:
    inputs = [{"name": "a", "parameters": {"binary_data_size": 8}}]
    with pytest.raises(TensorError, match="only 4 remain"):
        slice_inputs(inputs, memoryview(b"1234"))
    with pytest.raises(TensorError, match="4 bytes of binary data after"):
        slice_inputs([{"name": "a", "parameters": {"binary_data_size": 4}}], memoryview(b"12345678"))
    with pytest.raises(TensorError, match="non-negative integer"):
        slice_inputs([{"name": "a", "parameters": {"binary_data_size": "8"}}], memoryview(b"12345678"))


def test_reply_with_binary_outputs_says_where_the_json_ends() -> None:
    header = {"model_name": "m", "outputs": [{"name": "x", "parameters": {"binary_data_size": 4}}]}
    body, length = join_body(header, [b"\x00\x00\x80\x3f"])
    assert length is not None
    assert json.loads(body[:length]) == header
    assert np.frombuffer(body[length:], dtype="<f4").tolist() == [1.0]


def test_reply_without_binary_outputs_is_plain_json() -> None:
    body, length = join_body({"model_name": "m", "outputs": []}, [])
    assert length is None and json.loads(body) == {"model_name": "m", "outputs": []}


def test_error_messages_stay_short_whatever_the_client_sent() -> None:
    for body, length in ((b"{}", "x" * 100_000), (b'{"a": ' + b"1" * 5000 + b"}", None)):
        with pytest.raises(TensorError) as caught:
            split_body(body, length)
        assert len(str(caught.value)) < 300
    with pytest.raises(TensorError) as named:
        slice_inputs([{"name": "n" * 100_000, "parameters": {"binary_data_size": 8}}], memoryview(b""))
    assert len(str(named.value)) < 300
