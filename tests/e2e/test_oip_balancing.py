"""OIP requests at the gateway are treated like every other request: API keys, balancing, retries on failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from depthserve.probes import free_port
from depthserve.testing.processes import Proc, start_gateway, start_worker, wait_until
from depthserve.testing.samples import png_bytes, seeded_image
from depthserve.testing.tls import make_test_pki

MODEL = "lingbot-depth"
KEY = "oip-test-key"
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Two synthetic workers behind a gateway that wants an API key and serves OIP gRPC."""
    logs = tmp_path_factory.mktemp("logs")
    keys = Path(logs) / "keys.txt"
    keys.write_text(f"tester:plain:{KEY}\n")
    workers = []
    try:
        for index in range(2):
            workers.append(start_worker(logs, name=f"worker{index}"))
        grpc_port = free_port()
        gateway, url = start_gateway(
            logs,
            [address for _, address in workers],
            "--grpc-port",
            str(grpc_port),
            "--api-keys-file",
            str(keys),
            "--health-interval-s",
            "0.2",
        )
    except BaseException:
        for proc, _ in workers:
            proc.stop()
        raise
    yield {"url": url, "grpc": f"127.0.0.1:{grpc_port}", "workers": workers, "gateway": gateway}
    gateway.stop()
    for proc, _ in workers:
        proc.stop()


def image_input() -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("image", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([png_bytes(seeded_image(32, 40))], dtype=np.object_))
    return tensor


def served(cluster: dict[str, Any]) -> dict[str, int]:
    view = httpx.get(f"{cluster['url']}/v1/cluster", timeout=10).json()
    return {backend["address"]: backend["served"] for backend in view["backends"]}


def test_a_key_is_needed_over_grpc_and_rest(cluster: dict[str, Any]) -> None:
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    assert client.is_server_live()  # liveness stays open, like /healthz
    with pytest.raises(InferenceServerException) as caught:
        client.infer(MODEL, [image_input()])
    assert caught.value.status() == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(InferenceServerException) as meta:
        client.get_model_metadata(MODEL)
    assert meta.value.status() == "StatusCode.UNAUTHENTICATED"
    assert client.infer(MODEL, [image_input()], headers=AUTH).as_numpy("depth").shape == (32, 40)
    client.close()
    rest = httpclient.InferenceServerClient(cluster["url"].removeprefix("http://"))
    with pytest.raises(InferenceServerException) as refused:
        rest.get_model_metadata(MODEL)
    assert refused.value.status() == "401"
    assert rest.get_model_metadata(MODEL, headers=AUTH)["name"] == MODEL
    rest.close()


def test_grpc_requests_are_balanced_over_the_workers(cluster: dict[str, Any]) -> None:
    before = served(cluster)
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    for _ in range(6):
        client.infer(MODEL, [image_input()], headers=AUTH)
    client.close()
    after = served(cluster)
    assert sorted(after[a] - before[a] for a in after) == [3, 3]  # round robin, as /v1/depth gets


def test_grpc_requests_survive_a_dead_worker(cluster: dict[str, Any]) -> None:
    proc, dead = cluster["workers"][0]
    proc.kill()
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    for _ in range(6):  # the gateway retries on the other worker; the client never sees the failure
        assert client.infer(MODEL, [image_input()], headers=AUTH).as_numpy("depth").shape == (32, 40)
    client.close()
    assert cluster["gateway"].alive()


def test_grpc_over_tls_with_the_gateway_certificate(tmp_path: Path) -> None:
    pki = make_test_pki(tmp_path / "pki")
    worker, address = start_worker(tmp_path)
    port, grpc_port = free_port(), free_port()
    gateway = Proc(
        ["gateway", "--port", str(port), "--backends", address, "--grpc-port", str(grpc_port)]
        + ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)],
        tmp_path / "gw.log",
    )
    target = f"127.0.0.1:{grpc_port}"
    client = grpcclient.InferenceServerClient(target, ssl=True, root_certificates=str(pki.ca))

    def ready() -> bool:
        # A fresh channel per look: one dialled before the port listened backs off for longer and longer,
        # and on a loaded machine could miss the whole wait.
        probe = grpcclient.InferenceServerClient(target, ssl=True, root_certificates=str(pki.ca))
        try:
            return bool(probe.is_server_ready(client_timeout=5))
        except InferenceServerException:
            return False
        finally:
            probe.close()

    try:
        wait_until(ready, gateway, 30)
        assert client.infer(MODEL, [image_input()]).as_numpy("depth").shape == (32, 40)
        plain = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        with pytest.raises(InferenceServerException):
            plain.is_server_live(client_timeout=5)  # cleartext is not spoken on a TLS port
        plain.close()
    finally:
        client.close()
        gateway.stop()
        worker.stop()
