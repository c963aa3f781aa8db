"""Backend specs: weights written next to the address, and clear refusals of malformed ones."""

from __future__ import annotations

import pytest

from depthserve.discovery.backend_spec import BackendSpec, parse_backend


def test_forms() -> None:
    assert parse_backend("10.0.0.1:50051") == BackendSpec("10.0.0.1:50051", 1.0)
    assert parse_backend(" gpu-a:50051@4 ") == BackendSpec("gpu-a:50051", 4.0)
    assert parse_backend("gpu-b:50051@auto").auto
    assert parse_backend("gpu-c:50051", default_auto=True).auto
    assert parse_backend("[::1]:50051@0.5") == BackendSpec("[::1]:50051", 0.5)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nohost", "HOST:PORT"),
        ("h:0", "HOST:PORT"),
        ("h:70000", "HOST:PORT"),
        ("h:1@fast", "number or 'auto'"),
        ("h:1@0", "positive"),
        ("h:1@-2", "positive"),
    ],
)
def test_refusals(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_backend(spec)
