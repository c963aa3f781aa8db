"""The torch worker on a CPU: overlapped batches over gRPC answer as the model does, precision is chosen and stated."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from depthserve.model import predict
from depthserve.protocol.depth_api import DepthInputs, build_request, read_raw_outputs
from depthserve.protocol.load_report import from_metadata
from depthserve.settings import WorkerSettings
from depthserve.testing.samples import png_bytes, seeded_image
from depthserve.worker.runners.torch_runner import TorchRunner
from depthserve.worker.server import Worker


async def test_overlapped_batches_over_grpc_answer_as_the_model_does(tiny_model: Any) -> None:
    settings = WorkerSettings(
        port=0, model="tiny", threads=1, pipeline_depth=2, max_batch_size=4, batching="fixed", max_queue_delay_ms=100
    )
    worker = Worker(settings)
    await worker.start()
    images = [seeded_image(48, 64, seed) for seed in range(10)]
    depths = [None if seed % 3 == 0 else np.full((48, 64), 0.5 + seed / 4, np.float32) for seed in range(10)]
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{worker.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)

            async def send(index: int) -> tuple[dict[str, np.ndarray], Any]:
                inputs = DepthInputs(image=png_bytes(images[index]), depth=depths[index], resolution_level=3)
                call = stub.ModelInfer(build_request("lingbot-depth", inputs), timeout=60)
                reply = await call
                return read_raw_outputs(reply), from_metadata(await call.trailing_metadata())

            results = await asyncio.gather(*(send(index) for index in range(10)))
    finally:
        await worker.server.stop(0)
    for index, (outputs, _) in enumerate(results):
        expected = predict(tiny_model, images[index], depths[index], resolution_level=3)
        np.testing.assert_allclose(outputs["depth"], expected["depth"], atol=1e-5, rtol=1e-5)
        np.testing.assert_array_equal(outputs["mask"], expected["mask"])
    reports = [report for _, report in results]
    assert all(report.slots == 8 for report in reports)  # a batch of 4 computing, one of 4 staged
    assert max(report.batch_size for report in reports) > 1  # they really ran as batches
    assert worker.runner.pipeline_depth == 2


def test_a_cpu_computes_in_fp32_unless_asked() -> None:
    runner = TorchRunner(WorkerSettings(model="tiny", threads=1))
    runner.load()
    assert runner.precision == "fp32" and [trial.precision for trial in runner.trials] == ["fp32"]
    assert runner.pipeline_depth == 1  # the CPU path stays as it was: stages in turn, no thread hop


def test_an_asked_precision_is_used_and_its_distance_from_fp32_stated() -> None:
    runner = TorchRunner(WorkerSettings(model="tiny", threads=1, precision="bf16"))
    runner.load()
    fp32, bf16 = runner.trials
    assert runner.precision == "bf16" and fp32.precision == "fp32" and fp32.error == 0.0
    assert 0 < bf16.error < 0.02 and bf16.seconds > 0


def test_a_worker_asked_for_cuda_without_one_says_so_and_exits() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "depthserve", "worker", "--port", "0", "--device", "cuda:0"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stderr
    assert "--device cuda:0: torch" in done.stderr and "sees no CUDA device" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["0", "5"])
def test_a_pipeline_depth_out_of_range_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="pipeline_depth"):
        WorkerSettings(pipeline_depth=int(value))
