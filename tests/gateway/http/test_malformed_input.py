"""Client input a gateway must answer with a 400, never a 500 or a misleading status: nested JSON, odd deadlines."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from depthserve.testing.processes import Proc, start_gateway, start_worker


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, str]]:
    logs = tmp_path_factory.mktemp("malformed")
    worker, address = start_worker(logs, "--warmup-levels", "0")
    proc, url = start_gateway(logs, [address])  # jobs run in-process: /v1/jobs parses uploads here too
    yield proc, url
    proc.stop()
    worker.stop()


@pytest.mark.parametrize("path", ["/v1/depth", "/v1/jobs"])
@pytest.mark.parametrize("intrinsics", ["[" * 2000 + "]" * 2000, "[" * 3000, '{"fx":' * 3000])
def test_deeply_nested_intrinsics_are_a_400_without_a_traceback(
    gateway: tuple[Proc, str], rgb_png: bytes, path: str, intrinsics: str
) -> None:
    proc, url = gateway
    image = {"image": ("a.png", rgb_png, "image/png")}
    reply = httpx.post(f"{url}{path}", files=image, data={"intrinsics": intrinsics}, timeout=30)
    assert reply.status_code == 400 and reply.json()["reason"] == "invalid_request"
    assert "intrinsics" in reply.json()["error"]
    assert "Traceback" not in proc.output() and "RecursionError" not in proc.output()
    fine = httpx.post(f"{url}{path}", files=image, data={"intrinsics": "500,500,32,24"}, timeout=30)
    assert fine.status_code in (200, 202)


@pytest.mark.parametrize("value", ["1e-300", "0.0009", "0", "-1", "nan", "inf", "1e400", "soon"])
def test_an_unusable_request_timeout_is_a_400(gateway: tuple[Proc, str], rgb_png: bytes, value: str) -> None:
    _, url = gateway
    reply = httpx.post(
        f"{url}/v1/depth", content=rgb_png, headers={"content-type": "image/png", "x-request-timeout": value}
    )
    assert reply.status_code == 400 and reply.json()["reason"] == "invalid_request"
    assert "X-Request-Timeout" in reply.json()["error"]


def test_a_usable_request_timeout_is_taken(gateway: tuple[Proc, str], rgb_png: bytes) -> None:
    _, url = gateway
    reply = httpx.post(
        f"{url}/v1/depth", content=rgb_png, headers={"content-type": "image/png", "x-request-timeout": "20"}
    )
    assert reply.status_code == 200
