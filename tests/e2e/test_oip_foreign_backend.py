"""The gateway in front of an OIP server that is not depthserve: metadata and inference pass through unchanged."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import HealthServicer
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc
from tritonclient.utils import InferenceServerException

from depthserve.probes import free_port, grpc_serving
from depthserve.testing.processes import start_gateway

A = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
B = np.array([[10, 20, 30], [40, 50, -60]], dtype=np.int32)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The foreign `add` server behind a gateway; health checks use gRPC health only (no depth probe)."""
    logs = tmp_path_factory.mktemp("logs")
    port = free_port()
    address = f"127.0.0.1:{port}"
    with (logs / "foreign.log").open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "depthserve.testing.foreign_oip", str(port)], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while not grpc_serving(address):
            assert server.poll() is None and time.monotonic() < deadline, (logs / "foreign.log").read_text()
            time.sleep(0.1)
        config = logs / "gateway.yaml"
        config.write_text("probe_inference_every: 0\nhealth_interval_s: 0.2\n")
        grpc_port = free_port()
        gateway, url = start_gateway(
            logs, [address], "--grpc-port", str(grpc_port), "--model", "add", "--config", str(config)
        )
    except BaseException:
        server.kill()
        server.wait()
        raise
    yield {"http": url.removeprefix("http://"), "grpc": f"127.0.0.1:{grpc_port}"}
    gateway.stop()
    server.kill()
    server.wait()


def inputs(module: Any, binary: bool) -> list[Any]:
    tensors = []
    for name, value in (("a", A), ("b", B)):
        tensor = module.InferInput(name, list(value.shape), "INT32")
        if module is httpclient:
            tensor.set_data_from_numpy(value, binary_data=binary)
        else:
            tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors


def test_metadata_and_readiness_come_from_the_foreign_server(cluster: dict[str, Any]) -> None:
    client = httpclient.InferenceServerClient(cluster["http"])
    meta = client.get_model_metadata("add")
    assert meta["versions"] == ["7"] and meta["platform"] == "python"
    assert client.is_model_ready("add", "7") and not client.is_model_ready("add", "8")
    assert client.get_model_config("add")["input"][0] == {"name": "a", "data_type": "TYPE_INT32", "dims": [-1]}
    with pytest.raises(InferenceServerException, match="no model 'lingbot-depth' here"):
        client.get_model_metadata("lingbot-depth")
    client.close()


@pytest.mark.parametrize("binary", [True, False])
def test_rest_infer_passes_through(cluster: dict[str, Any], binary: bool) -> None:
    client = httpclient.InferenceServerClient(cluster["http"])
    outputs = [httpclient.InferRequestedOutput("sum", binary_data=binary)]
    result = client.infer("add", inputs(httpclient, binary), outputs=outputs, model_version="7")
    np.testing.assert_array_equal(result.as_numpy("sum"), A + B)
    assert result.get_response()["model_version"] == "7"
    client.close()


def test_grpc_infer_passes_through_and_typed_replies_are_readable(cluster: dict[str, Any]) -> None:
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    np.testing.assert_array_equal(client.infer("add", inputs(grpcclient, True)).as_numpy("sum"), A + B)
    wrong = grpcclient.InferInput("a", [2, 3], "INT32")
    wrong.set_data_from_numpy(A)
    with pytest.raises(InferenceServerException, match="INT32 inputs a and b") as caught:
        client.infer("add", [wrong])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    client.close()


class BrokenServicer(pb_grpc.GRPCInferenceServiceServicer):
    """An OIP server whose replies do not hold together: 7 bytes of raw contents for a [2] FP32 output."""

    def ModelReady(self, request: pb.ModelReadyRequest, context: grpc.ServicerContext) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=True)

    def ModelInfer(self, request: pb.ModelInferRequest, context: grpc.ServicerContext) -> pb.ModelInferResponse:
        response = pb.ModelInferResponse(model_name="broken")
        response.outputs.add(name="y", datatype="FP32", shape=[2])
        response.raw_output_contents.append(b"\x00" * 7)
        return response


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The broken server, in this process, behind a gateway; gives the gateway's host:port."""
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(BrokenServicer(), server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    health.set("", health_pb2.HealthCheckResponse.SERVING)
    logs = tmp_path_factory.mktemp("broken")
    config = logs / "gateway.yaml"
    config.write_text("probe_inference_every: 0\nhealth_interval_s: 0.2\n")
    try:
        gateway, url = start_gateway(logs, [f"127.0.0.1:{port}"], "--model", "broken", "--config", str(config))
    except BaseException:
        server.stop(None)
        raise
    yield url.removeprefix("http://")
    gateway.stop()
    server.stop(None)


def test_a_malformed_backend_reply_is_a_502_not_a_400_or_500(broken: str) -> None:
    client = httpclient.InferenceServerClient(broken)
    tensor = httpclient.InferInput("x", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32), binary_data=False)
    with pytest.raises(InferenceServerException, match="has 7 bytes") as caught:
        client.infer("broken", [tensor], outputs=[httpclient.InferRequestedOutput("y", binary_data=False)])
    assert caught.value.status() == "502"
    client.close()
