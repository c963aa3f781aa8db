"""A worker process's lifecycle: it drains in-flight work on SIGTERM and exits cleanly."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.protocol.depth_api import DepthInputs, build_request
from depthserve.testing.processes import start_worker


def test_sigterm_lets_in_flight_requests_finish(tmp_path: Path, rgb_png: bytes) -> None:
    worker, address = start_worker(tmp_path, "--model", "synthetic", "--synthetic-ms", "1500")
    replies: list[pb.ModelInferResponse] = []

    def send() -> None:
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            replies.append(stub.ModelInfer(build_request("lingbot-depth", DepthInputs(image=rgb_png)), timeout=30))

    sender = threading.Thread(target=send)
    sender.start()
    time.sleep(0.5)
    code = worker.stop()
    sender.join(10)
    assert code == 0
    assert len(replies) == 1 and replies[0].outputs[0].name == "depth"
    assert "served 1, failed 0" in worker.output()
    assert "Traceback" not in worker.output()
