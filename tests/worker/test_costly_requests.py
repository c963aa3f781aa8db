"""A worker process refuses requests of unbounded cost at once, stays healthy, and answers config and health cleanly."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.protocol.depth_api import DepthInputs, build_request, read_raw_outputs
from depthserve.testing.processes import Proc, start_worker
from depthserve.testing.samples import png_bytes, png_claiming

MODEL = "lingbot-depth"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
OIP_SERVICE = "inference.GRPCInferenceService"  # the name health checkers ask for


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Proc, str]]:
    """One worker running the real tiny network, so a hostile request would really cost it."""
    worker, address = start_worker(tmp_path_factory.mktemp("logs"), "--model", "tiny", "--threads", "1")
    yield worker, address
    worker.stop()


def health(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
    return int(reply.status)


def infer(address: str, inputs: DepthInputs) -> pb.ModelInferResponse:
    with grpc.insecure_channel(address) as channel:
        # The deadline only ends the test if the worker does the work; a refusal comes long before it.
        return pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(build_request(MODEL, inputs), timeout=60)


@pytest.mark.parametrize(
    ("hostile", "message"),
    [
        (DepthInputs(image=b"RGB", num_tokens=100_000), "num_tokens must be between"),
        (DepthInputs(image=png_bytes(np.zeros((1, 1_000_000, 3), np.uint8))), "1000000x1 pixels has an aspect ratio"),
        (
            DepthInputs(image=b"RGB", depth=png_claiming(6000, 4000, bit_depth=16, colour=0)),
            "depth map is 4000x6000 (HxW) but the image is 48x64",
        ),
    ],
    ids=["num_tokens_100000", "png_1000000x1", "depth_6000x4000"],
)
def test_a_costly_request_is_refused_and_the_next_one_served(
    tiny: tuple[Proc, str], rgb_png: bytes, hostile: DepthInputs, message: str
) -> None:
    worker, address = tiny
    if hostile.image == b"RGB":
        hostile = DepthInputs(image=rgb_png, depth=hostile.depth, num_tokens=hostile.num_tokens)
    sent = answered = failed = 0
    sent += 1
    with pytest.raises(grpc.RpcError) as refused:
        infer(address, hostile)
    failed += 1
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
    assert message in refused.value.details()
    assert health(address, "") == SERVING and health(address, OIP_SERVICE) == SERVING
    sent += 1
    reply = infer(address, DepthInputs(image=rgb_png))
    answered += 1
    assert read_raw_outputs(reply)["depth"].shape == (48, 64)
    assert (sent, answered, failed) == (2, 1, 1) and worker.alive()


def test_model_config_answers_without_a_traceback(tiny: tuple[Proc, str]) -> None:
    worker, address = tiny
    before = len(worker.output())
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        for _ in range(3):
            config = stub.ModelConfig(pb.ModelConfigRequest(name=MODEL), timeout=10).config
            assert config.name == MODEL and config.max_batch_size == 0
            assert [t.name for t in config.input] == ["image", "depth", "intrinsics"]
            assert [t.name for t in config.output] == ["depth", "mask", "points"]
        with pytest.raises(grpc.RpcError) as unknown:
            stub.ModelConfig(pb.ModelConfigRequest(name="nope"), timeout=10)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    log = worker.output()[before:]
    assert "Traceback" not in log and "NotImplementedError" not in log and "ERROR" not in log, log[-2000:]


def test_health_names_the_oip_service_and_reports_the_drain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPTHSERVE_WORKER_DRAIN_QUIET_S", "30")  # stay in the drain notice until it ends
    worker, address = start_worker(tmp_path, "--drain-notice-s", "30")
    try:
        assert health(address, OIP_SERVICE) == SERVING
        with pytest.raises(grpc.RpcError) as unknown:
            health(address, "no.such.Service")
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
        worker.popen.send_signal(signal.SIGTERM)
        statuses = []
        for _ in range(100):  # the notice lasts 30 s; NOT_SERVING comes as soon as SIGTERM is handled
            statuses.append(health(address, OIP_SERVICE))
            if statuses[-1] == NOT_SERVING:
                break
            time.sleep(0.1)
        assert statuses[-1] == NOT_SERVING and health(address, "") == NOT_SERVING
    finally:
        worker.kill()
