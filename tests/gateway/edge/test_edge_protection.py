"""Edge protection against real gateway processes: overload answers, rate limits, limits, keys, TLS."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from depthserve.gateway.edge.api_keys import hash_key
from depthserve.probes import free_port
from depthserve.testing.processes import Proc, start_gateway, start_worker, wait_until
from depthserve.testing.samples import png_bytes
from depthserve.testing.tls import Pki, make_test_pki

PNG = {"Content-Type": "image/png"}


def post(url: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/depth", content=body, headers={**PNG, **headers}, timeout=30)


def raw_http11(port: int, head: bytes, body_start: bytes = b"") -> bytes:
    """Send request headers and only the start of a body, then read what the server answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + body_start)
        sock.settimeout(10)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply


def png_header_claiming(width: int, height: int) -> bytes:
    """The first bytes of a PNG whose header claims width x height pixels, up to its first IDAT chunk."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", len(ihdr)) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + chunk + struct.pack(">I", 800000) + b"IDAT" + b"\0" * 64


@pytest.fixture
def slow_worker(tmp_path: Path) -> Iterator[str]:
    worker, address = start_worker(tmp_path, "--synthetic-ms", "1000", "--warmup-levels", "0")
    yield address
    worker.stop()


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text("probe_inference_every: 0\n" + text)
    return str(path)


def test_full_admission_queue_answers_503_at_once(tmp_path: Path, slow_worker: str, rgb_png: bytes) -> None:
    gateway, url = start_gateway(
        tmp_path, [slow_worker], "--max-in-flight", "1", "--max-queue", "1", "--config", config(tmp_path, "")
    )
    order: list[str] = []
    try:

        def send(name: str) -> None:
            reply = post(url, rgb_png)
            order.append(f"{name}:{reply.status_code}")

        threads = [threading.Thread(target=send, args=(f"r{i}",)) for i in range(2)]
        for thread in threads:
            thread.start()
        wait_until(lambda: httpx.get(f"{url}/v1/cluster").json()["admission"]["queued"]["normal"] == 1, gateway, 10)
        refused = post(url, rgb_png)
        order.append(f"r2:{refused.status_code}")
        assert refused.status_code == 503 and refused.json()["reason"] == "queue_full"
        assert int(refused.headers["retry-after"]) >= 1
        for thread in threads:
            thread.join(30)
        assert order[0] == "r2:503"  # refused before either admitted request finished
        assert sorted(order[1:]) == ["r0:200", "r1:200"]
    finally:
        gateway.stop()


def test_deadline_while_queued_answers_503_deadline(tmp_path: Path, slow_worker: str, rgb_png: bytes) -> None:
    gateway, url = start_gateway(tmp_path, [slow_worker], "--max-in-flight", "1", "--config", config(tmp_path, ""))
    try:
        first = threading.Thread(target=post, args=(url, rgb_png))
        first.start()
        wait_until(lambda: httpx.get(f"{url}/v1/cluster").json()["admission"]["in_flight"] == 1, gateway, 10)
        reply = post(url, rgb_png, **{"X-Request-Timeout": "0.3"})
        assert reply.status_code == 503 and reply.json()["reason"] == "deadline"
        assert "retry-after" in reply.headers
        bad = post(url, rgb_png, **{"X-Priority": "urgent"})
        assert bad.status_code == 400
        first.join(30)
    finally:
        gateway.stop()


def test_rate_limit_answers_429_with_retry_after(tmp_path: Path, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path)
    gateway, url = start_gateway(tmp_path, [address], "--rate-limit", "1/min burst 2")
    try:
        assert [post(url, rgb_png).status_code for _ in range(2)] == [200, 200]
        limited = post(url, rgb_png)
        assert limited.status_code == 429 and limited.json()["reason"] == "rate_limited"
        assert 1 <= int(limited.headers["retry-after"]) <= 60
    finally:
        gateway.stop()
        worker.stop()


@pytest.fixture(scope="module")
def limited_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    logs = tmp_path_factory.mktemp("limits")
    worker, address = start_worker(logs)
    gateway, url = start_gateway(
        logs,
        [address],
        "--max-body-mb",
        "1",
        "--upload-timeout-s",
        "0.5",
        "--config",
        config(logs, "max_parts: 3\nmax_pixels: 1000000\n"),
    )
    yield url, int(url.rsplit(":", 1)[1])
    gateway.stop()
    worker.stop()


def test_oversized_body_is_refused_before_it_is_sent(limited_gateway: tuple[str, int]) -> None:
    _, port = limited_gateway
    head = b"POST /v1/depth HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 104857600\r\n\r\n"
    reply = raw_http11(port, head)  # not one byte of the 100 MB body is sent
    assert reply.split(b"\r\n")[0].startswith(b"HTTP/1.1 413")


def test_too_many_pixels_refused_from_the_header(limited_gateway: tuple[str, int]) -> None:
    _, port = limited_gateway
    head = b"POST /v1/depth HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 900000\r\n\r\n"
    reply = raw_http11(port, head, png_header_claiming(5000, 5000))  # only the first 100 bytes are sent
    assert reply.split(b"\r\n")[0].startswith(b"HTTP/1.1 413")


def test_too_many_parts_refused_while_streaming(limited_gateway: tuple[str, int]) -> None:
    _, port = limited_gateway
    parts = b"".join(b'--B\r\nContent-Disposition: form-data; name="f%d"\r\n\r\nx\r\n' % i for i in range(5))
    head = (
        b"POST /v1/depth HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=B\r\n"
        b"Content-Length: 900000\r\n\r\n"
    )
    reply = raw_http11(port, head, parts)  # the rest of the 900 KB never comes
    assert reply.split(b"\r\n")[0].startswith(b"HTTP/1.1 413")


def test_http2_clients_see_413_for_too_many_pixels(limited_gateway: tuple[str, int]) -> None:
    url, _ = limited_gateway
    big = png_bytes(np.zeros((1100, 1000, 3), dtype=np.uint8))
    with httpx.Client(http1=False, http2=True, timeout=30) as client:
        reply = client.post(f"{url}/v1/depth", content=big, headers=PNG)
    assert reply.status_code == 413 and reply.json()["reason"] == "too_many_pixels"


def test_slow_upload_times_out_with_408(limited_gateway: tuple[str, int]) -> None:
    _, port = limited_gateway
    head = b"POST /v1/depth HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 5000\r\n\r\n"
    reply = raw_http11(port, head, b"\x89PNG")  # then nothing: the gateway gives up after 0.5 s
    assert reply.split(b"\r\n")[0].startswith(b"HTTP/1.1 408")


def test_api_keys(tmp_path: Path, rgb_png: bytes) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"# team keys\nalice:{hash_key('secret-a')}\nbob:plain:secret-b\n")
    worker, address = start_worker(tmp_path)
    gateway, url = start_gateway(tmp_path, [address], "--api-keys-file", str(keys))
    try:
        missing, wrong = post(url, rgb_png), post(url, rgb_png, Authorization="Bearer nope")
        assert missing.status_code == wrong.status_code == 401
        assert missing.json() == wrong.json() == {"error": "missing or invalid API key", "reason": "unauthorized"}
        assert missing.headers["www-authenticate"] == "Bearer"
        assert post(url, rgb_png, Authorization="Bearer secret-a").status_code == 200
        assert post(url, rgb_png, **{"X-API-Key": "secret-b"}).status_code == 200
        assert httpx.get(f"{url}/healthz").status_code == 200  # health stays open by default
        assert httpx.post(f"{url}/v1/cluster/{address}/drain").status_code == 401
        assert httpx.post(f"{url}/v1/cluster/{address}/undrain", headers={"X-API-Key": "secret-b"}).status_code == 200
    finally:
        gateway.stop()
        worker.stop()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_test_pki(tmp_path_factory.mktemp("pki"))


def test_https_with_h2_alpn(tmp_path: Path, pki: Pki, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path)
    port = free_port()
    gateway = Proc(
        [
            "gateway",
            "--port",
            str(port),
            "--backends",
            address,
            "--tls-cert",
            str(pki.server_cert),
            "--tls-key",
            str(pki.server_key),
        ],
        tmp_path / "gw.log",
    )
    url = f"https://127.0.0.1:{port}"
    try:
        wait_until(lambda: _https_ready(url, pki.ca), gateway, 30)
        done = subprocess.run(
            [
                "curl",
                "-sS",
                "--cacert",
                str(pki.ca),
                "--http2",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{http_version}",
                "-H",
                "Content-Type: image/png",
                "--data-binary",
                "@-",
                f"{url}/v1/depth",
            ],
            input=rgb_png,
            capture_output=True,
            timeout=30,
        )
        assert done.stdout == b"200 2", done.stderr
        with httpx.Client(http2=True, verify=ssl.create_default_context(cafile=str(pki.ca)), timeout=30) as client:
            reply = client.post(f"{url}/v1/depth", content=rgb_png, headers=PNG)
            assert reply.status_code == 200 and reply.http_version == "HTTP/2"
        with httpx.Client(
            http1=True, http2=False, verify=ssl.create_default_context(cafile=str(pki.ca)), timeout=30
        ) as client:
            assert client.get(f"{url}/healthz").http_version == "HTTP/1.1"
    finally:
        gateway.stop()
        worker.stop()


def _https_ready(url: str, ca: Path) -> bool:
    try:
        return (
            httpx.get(f"{url}/readyz", verify=ssl.create_default_context(cafile=str(ca)), timeout=1).status_code == 200
        )
    except httpx.HTTPError:
        return False


def test_mutual_tls_between_gateway_and_worker(tmp_path: Path, pki: Pki, rgb_png: bytes) -> None:
    port = free_port()
    address = f"127.0.0.1:{port}"
    worker = Proc(
        [
            "worker",
            "--port",
            str(port),
            "--model",
            "synthetic",
            "--synthetic-ms",
            "0",
            "--warmup-levels",
            "0",
            "--tls-cert",
            str(pki.server_cert),
            "--tls-key",
            str(pki.server_key),
            "--tls-ca",
            str(pki.ca),
        ],
        tmp_path / "worker.log",
    )
    gateway = None
    try:
        wait_until(lambda: "worker ready" in worker.output(), worker, 30)
        gateway, url = start_gateway(
            tmp_path,
            [address],
            "--backend-tls-ca",
            str(pki.ca),
            "--backend-tls-cert",
            str(pki.client_cert),
            "--backend-tls-key",
            str(pki.client_key),
        )
        assert post(url, rgb_png).status_code == 200
        # A client that trusts the worker but shows no certificate of its own is refused.
        anonymous = grpc.ssl_channel_credentials(pki.ca.read_bytes())
        with grpc.secure_channel(address, anonymous) as channel, pytest.raises(grpc.RpcError) as refused:
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        # And plaintext gets nowhere either.
        with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError):
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    finally:
        if gateway is not None:
            gateway.stop()
        worker.stop()


def test_worker_refuses_work_beyond_its_memory_budget(tmp_path: Path) -> None:
    worker, address = start_worker(tmp_path, "--synthetic-mem-gb", "1")
    gateway, url = start_gateway(tmp_path, [address])
    try:
        huge = png_bytes(np.zeros((4000, 4000, 3), dtype=np.uint8))  # 16 MP x 64 B = 1 GiB > 0.9 GiB budget
        reply = post(url, huge)
        assert reply.status_code == 503 and reply.json()["reason"] == "backend_overloaded"
        assert "not enough memory" in reply.json()["error"]
        assert post(url, png_bytes(np.zeros((64, 64, 3), dtype=np.uint8))).status_code == 200
    finally:
        gateway.stop()
        worker.stop()
