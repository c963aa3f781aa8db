"""The worker's OIP service, in process, spoken to by the stock tritonclient and by raw gRPC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc
from tritonclient.utils import InferenceServerException

from depthserve.model import predict
from depthserve.protocol.depth_api import DepthInputs, build_request, read_raw_outputs
from depthserve.protocol.load_report import from_metadata
from depthserve.settings import WorkerSettings
from depthserve.worker.server import Worker


async def started(**overrides: Any) -> Worker:
    settings = WorkerSettings(port=0, **{"model": "synthetic", "synthetic_ms": 0.0, **overrides})
    worker = Worker(settings)
    await worker.start()
    return worker


@pytest.fixture
async def tiny_worker() -> AsyncIterator[Worker]:
    worker = await started(model="tiny", threads=1)
    yield worker
    await worker.server.stop(0)


async def test_stock_tritonclient_reads_metadata_and_infers(
    tiny_worker: Worker, rgb: np.ndarray, rgb_png: bytes, tiny_model: Any
) -> None:
    client = triton_aio.InferenceServerClient(f"127.0.0.1:{tiny_worker.port}")
    try:
        assert await client.is_server_live() and await client.is_server_ready()
        assert await client.is_model_ready("lingbot-depth")
        assert not await client.is_model_ready("other-model")
        meta = await client.get_model_metadata("lingbot-depth", as_json=True)
        assert {i["name"] for i in meta["inputs"]} == {"image", "depth", "intrinsics"}
        image = triton_aio.InferInput("image", [1], "BYTES")
        image.set_data_from_numpy(np.array([rgb_png], dtype=np.object_))
        result = await client.infer("lingbot-depth", [image])
        depth = result.as_numpy("depth")
        assert depth.shape == (48, 64) and result.as_numpy("mask").dtype == bool
        np.testing.assert_allclose(depth, predict(tiny_model, rgb)["depth"], atol=1e-5, rtol=0)
        # The same image as a UINT8 tensor gives the same answer.
        pixels = triton_aio.InferInput("image", list(rgb.shape), "UINT8")
        pixels.set_data_from_numpy(rgb)
        again = await client.infer("lingbot-depth", [pixels])
        np.testing.assert_allclose(again.as_numpy("depth"), depth, atol=1e-6, rtol=0)
    finally:
        await client.close()


async def test_every_reply_carries_a_load_report(tiny_worker: Worker, rgb_png: bytes) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{tiny_worker.port}") as channel:
        call = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            build_request("lingbot-depth", DepthInputs(image=rgb_png, resolution_level=0)), timeout=30
        )
        reply = await call
        report = from_metadata(await call.trailing_metadata())
    assert read_raw_outputs(reply)["depth"].shape == (48, 64)
    assert report is not None and report.max_batch == 1 and report.mem_total > 0 and report.ts > 0
    assert report.device == "cpu"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda r: r.inputs[0].__setattr__("name", "picture"), "unknown input"),
        (lambda r: r.inputs[0].__setattr__("datatype", "FP64"), "bytes"),
        (lambda r: r.parameters["resolution_level"].__setattr__("int64_param", 42), "resolution_level"),
        (lambda r: r.parameters["format"].__setattr__("string_param", "gif"), "format"),
        (lambda r: r.parameters["priority"].__setattr__("string_param", "urgent"), "priority"),
        (lambda r: r.raw_input_contents.__setitem__(0, b"\x05\x00\x00\x00abc"), "runs past"),
    ],
)
async def test_malformed_requests_get_invalid_argument(mutate: Any, message: str, rgb_png: bytes) -> None:
    worker = await started()
    try:
        request = build_request("lingbot-depth", DepthInputs(image=rgb_png))
        mutate(request)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{worker.port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as failure:
                await pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in failure.value.details()
        assert worker.state.failed == 1
    finally:
        await worker.server.stop(0)


async def test_unknown_model_is_not_found(rgb_png: bytes) -> None:
    worker = await started()
    client = triton_aio.InferenceServerClient(f"127.0.0.1:{worker.port}")
    try:
        image = triton_aio.InferInput("image", [1], "BYTES")
        image.set_data_from_numpy(np.array([rgb_png], dtype=np.object_))
        with pytest.raises(InferenceServerException, match="unknown model"):
            await client.infer("no-such-model", [image])
        # A name far longer than gRPC metadata allows is still refused as NOT_FOUND, its echo cut short.
        with pytest.raises(InferenceServerException) as huge:
            await client.infer("m" * 100_000, [image])
        assert huge.value.status() == "StatusCode.NOT_FOUND" and len(huge.value.message()) <= 1100
    finally:
        await client.close()
        await worker.server.stop(0)


async def test_full_queue_answers_resource_exhausted_at_once(rgb_png: bytes) -> None:
    worker = await started(synthetic_ms=300.0, queue_limit=1)
    request = build_request("lingbot-depth", DepthInputs(image=rgb_png))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{worker.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            calls = [asyncio.ensure_future(stub.ModelInfer(request, timeout=10)) for _ in range(4)]
            results = await asyncio.gather(*calls, return_exceptions=True)
        ok = [r for r in results if isinstance(r, pb.ModelInferResponse)]
        refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        # One runs, one waits, the rest are refused: every request is accounted for.
        assert len(ok) == 2 and len(refused) == 2
        assert all(r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for r in refused)
        assert "queue is full" in refused[0].details()
    finally:
        await worker.server.stop(0)


async def test_request_whose_deadline_passes_in_the_queue_is_not_computed(rgb_png: bytes) -> None:
    worker = await started(synthetic_ms=400.0)
    request = build_request("lingbot-depth", DepthInputs(image=rgb_png))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{worker.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            first = asyncio.ensure_future(stub.ModelInfer(request, timeout=10))
            await asyncio.sleep(0.05)
            with pytest.raises(grpc.aio.AioRpcError) as late:
                await stub.ModelInfer(request, timeout=0.2)
            assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            await first
            await asyncio.sleep(0.5)  # let the queued one reach the device and be dropped
        assert worker.state.served == 1
    finally:
        await worker.server.stop(0)


async def test_not_ready_until_the_model_is_loaded() -> None:
    settings = WorkerSettings(port=0, model="synthetic")
    worker = Worker(settings)
    worker.port = worker.server.add_insecure_port("127.0.0.1:0")
    await worker.server.start()
    client = triton_aio.InferenceServerClient(f"127.0.0.1:{worker.port}")
    try:
        assert await client.is_server_live()
        assert not await client.is_server_ready()
    finally:
        await client.close()
        await worker.server.stop(0)


async def test_batching_worker_runs_good_requests_together_and_refuses_a_bad_one_alone(rgb_png: bytes) -> None:
    # Fixed mode with a long delay: the batch closes only when four requests are in, whatever the timing.
    worker = await started(max_batch_size=4, batching="fixed", max_queue_delay_ms=60_000.0, synthetic_ms=5.0)
    good = build_request("lingbot-depth", DepthInputs(image=rgb_png))
    bad = build_request("lingbot-depth", DepthInputs(image=rgb_png))
    bad.parameters["resolution_level"].int64_param = 42
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{worker.port}") as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            calls = [stub.ModelInfer(r, timeout=30) for r in (good, bad, good, good, good)]
            results = await asyncio.gather(*calls, return_exceptions=True)
            report = from_metadata(await calls[0].trailing_metadata())
        refused = results[1]
        assert isinstance(refused, grpc.aio.AioRpcError) and refused.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert all(isinstance(r, pb.ModelInferResponse) for i, r in enumerate(results) if i != 1)
        assert report is not None and (report.batch_size, report.max_batch) == (4, 4)
        assert worker.state.computed == 4 and worker.batcher.last_batch_size == 4
    finally:
        await worker.server.stop(0)
