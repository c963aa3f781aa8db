"""Stock tritonclient (HTTP and gRPC, sync and asyncio) against a real gateway and straight against a worker.

One tiny-model worker behind one gateway with `--grpc-port`; every answer is compared with what
`POST /v1/depth` gives for the same image, and every bad request must get a clear error while both
processes stay up.
"""

from __future__ import annotations

import gzip
import io
import json
import queue
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcclient_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpclient_aio
from tritonclient.utils import InferenceServerException

from depthserve.probes import free_port
from depthserve.testing.processes import start_gateway, start_worker

MODEL = "lingbot-depth"
HUGE = {"a": 10**20}  # a parameter past int64


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, rgb_png: bytes) -> Iterator[dict[str, Any]]:
    """A tiny-model worker behind a gateway serving OIP over REST and gRPC (1 MiB body limit)."""
    logs = tmp_path_factory.mktemp("logs")
    worker, address = start_worker(logs, "--model", "tiny", "--threads", "1")
    grpc_port = free_port()
    try:
        gateway, url = start_gateway(logs, [address], "--grpc-port", str(grpc_port), "--max-body-mb", "1")
    except BaseException:
        worker.stop()
        raise
    reply = httpx.post(f"{url}/v1/depth", content=rgb_png, headers={"Content-Type": "image/png"}, timeout=60)
    assert reply.status_code == 200, reply.text
    yield {
        "http": url.removeprefix("http://"),
        "url": url,
        "grpc": f"127.0.0.1:{grpc_port}",
        "worker_grpc": address,
        "worker": worker,
        "gateway": gateway,
        "v1_depth": np.load(io.BytesIO(reply.content)),
    }
    gateway.stop()
    worker.stop()


def png_input(module: Any, png: bytes) -> Any:
    """The image as tritonclient users send an encoded file: a BYTES tensor of one element."""
    tensor = module.InferInput("image", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([png], dtype=np.object_))
    return tensor


def assert_matches_v1(cluster: dict[str, Any], depth: np.ndarray) -> None:
    expected = cluster["v1_depth"]
    assert depth.dtype == np.float32 and depth.shape == expected.shape == (48, 64)
    np.testing.assert_allclose(depth, expected, atol=1e-5, rtol=0)


def assert_healthy(cluster: dict[str, Any]) -> None:
    assert cluster["worker"].alive() and cluster["gateway"].alive()
    assert httpx.get(f"{cluster['url']}/v2/health/ready", timeout=10).status_code == 200


def test_http_metadata_readiness_and_config(cluster: dict[str, Any]) -> None:
    client = httpclient.InferenceServerClient(cluster["http"])
    assert client.is_server_live() and client.is_server_ready()
    server = client.get_server_metadata()
    assert server["name"] == "depthserve" and "binary_tensor_data" in server["extensions"]
    meta = client.get_model_metadata(MODEL)
    assert meta["name"] == MODEL and meta["versions"] == ["1"]  # the worker's answer, not a copy in the gateway
    assert [t["name"] for t in meta["inputs"]] == ["image", "depth", "intrinsics"]
    assert client.get_model_metadata(MODEL, "1")["name"] == MODEL
    assert client.is_model_ready(MODEL) and client.is_model_ready(MODEL, "1")
    assert not client.is_model_ready("no-such-model")
    config = client.get_model_config(MODEL)
    assert config["max_batch_size"] == 0 and config["input"][0] == {
        "name": "image",
        "data_type": "TYPE_STRING",
        "dims": [-1],
    }
    with pytest.raises(InferenceServerException, match="no-such-model") as caught:
        client.get_model_metadata("no-such-model")
    assert caught.value.status() == "404"
    with pytest.raises(InferenceServerException, match="not an OIP endpoint this gateway serves") as other:
        client.get_model_repository_index()
    assert other.value.status() == "404"
    client.close()


@pytest.mark.parametrize("target", ["grpc", "worker_grpc"])
def test_grpc_metadata_and_readiness(cluster: dict[str, Any], target: str) -> None:
    client = grpcclient.InferenceServerClient(cluster[target])
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_model_metadata(MODEL, as_json=True)
    assert meta["name"] == MODEL and [t["name"] for t in meta["outputs"]] == ["depth", "mask", "points"]
    assert client.is_model_ready(MODEL) and not client.is_model_ready("no-such-model")
    with pytest.raises(InferenceServerException, match="no-such-model") as caught:
        client.get_model_metadata("no-such-model")
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    client.close()


@pytest.mark.parametrize("compression", [None, "gzip", "deflate"])
def test_http_binary_infer_equals_v1_depth(cluster: dict[str, Any], rgb_png: bytes, compression: str | None) -> None:
    client = httpclient.InferenceServerClient(cluster["http"])
    result = client.infer(
        MODEL,
        [png_input(httpclient, rgb_png)],
        request_compression_algorithm=compression,
        response_compression_algorithm=compression,
    )
    assert_matches_v1(cluster, result.as_numpy("depth"))
    assert result.as_numpy("mask").dtype == bool
    client.close()


def test_http_json_tensors_equal_v1_depth(cluster: dict[str, Any], rgb: np.ndarray) -> None:
    client = httpclient.InferenceServerClient(cluster["http"])
    image = httpclient.InferInput("image", list(rgb.shape), "UINT8")
    image.set_data_from_numpy(rgb, binary_data=False)  # pixels as a JSON list of numbers
    outputs = [httpclient.InferRequestedOutput("depth", binary_data=False)]
    result = client.infer(MODEL, [image], outputs=outputs, request_id="json-1")
    response = result.get_response()
    assert response["id"] == "json-1" and [o["name"] for o in response["outputs"]] == ["depth"]
    assert "data" in response["outputs"][0]  # really answered in JSON
    assert_matches_v1(cluster, result.as_numpy("depth"))
    client.close()


async def test_http_asyncio_client(cluster: dict[str, Any], rgb_png: bytes) -> None:
    client = httpclient_aio.InferenceServerClient(cluster["http"])
    try:
        assert await client.is_server_ready() and await client.is_model_ready(MODEL)
        assert (await client.get_model_metadata(MODEL))["platform"]
        result = await client.infer(MODEL, [png_input(httpclient_aio, rgb_png)])
        assert_matches_v1(cluster, result.as_numpy("depth"))
        stats = await client.get_inference_statistics(MODEL)
        assert stats["model_stats"][0]["name"] == MODEL
        assert stats["model_stats"][0]["inference_stats"]["success"]["count"] >= 1
    finally:
        await client.close()


@pytest.mark.parametrize("target", ["grpc", "worker_grpc"])
def test_grpc_infer_equals_v1_depth(cluster: dict[str, Any], rgb_png: bytes, rgb: np.ndarray, target: str) -> None:
    client = grpcclient.InferenceServerClient(cluster[target])
    result = client.infer(MODEL, [png_input(grpcclient, rgb_png)])
    assert_matches_v1(cluster, result.as_numpy("depth"))
    pixels = grpcclient.InferInput("image", list(rgb.shape), "UINT8")
    pixels.set_data_from_numpy(rgb)
    assert_matches_v1(cluster, client.infer(MODEL, [pixels]).as_numpy("depth"))
    client.close()


@pytest.mark.parametrize("target", ["grpc", "worker_grpc"])
async def test_grpc_asyncio_client(cluster: dict[str, Any], rgb_png: bytes, target: str) -> None:
    client = grpcclient_aio.InferenceServerClient(cluster[target])
    try:
        assert await client.is_server_live() and await client.is_model_ready(MODEL)
        assert (await client.get_server_metadata()).name
        result = await client.infer(MODEL, [png_input(grpcclient_aio, rgb_png)])
        assert_matches_v1(cluster, result.as_numpy("depth"))
    finally:
        await client.close()


def bad_inputs(module: Any, rgb: np.ndarray, rgb_png: bytes) -> dict[str, tuple[str, Any]]:
    """Requests a user gets wrong, each with the text its error must contain."""
    short = png_input(module, rgb_png)
    short.set_shape([2])  # says two elements, sends one
    flat = module.InferInput("image", [48, 64], "UINT8")
    flat.set_data_from_numpy(rgb[:, :, 0].copy())
    floats = module.InferInput("image", list(rgb.shape), "FP32")
    floats.set_data_from_numpy(rgb.astype(np.float32))
    return {
        "shape and data disagree": ("holds 1 elements", short),
        "wrong shape": ("[H,W,3]", flat),
        "bad datatype": ("UINT8", floats),
    }


@pytest.mark.parametrize("case", ["shape and data disagree", "wrong shape", "bad datatype"])
def test_http_bad_requests_get_a_clear_4xx(cluster: dict[str, Any], rgb: np.ndarray, rgb_png: bytes, case: str) -> None:
    client = httpclient.InferenceServerClient(cluster["http"])
    text, tensor = bad_inputs(httpclient, rgb, rgb_png)[case]
    with pytest.raises(InferenceServerException) as caught:
        client.infer(MODEL, [tensor])
    assert caught.value.status() == "400" and text in caught.value.message()
    with pytest.raises(InferenceServerException, match="no-such-model") as unknown:
        client.infer("no-such-model", [png_input(httpclient, rgb_png)])
    assert unknown.value.status() == "404"
    client.close()
    assert_healthy(cluster)


@pytest.mark.parametrize("target", ["grpc", "worker_grpc"])
@pytest.mark.parametrize("case", ["shape and data disagree", "wrong shape", "bad datatype"])
def test_grpc_bad_requests_get_invalid_argument(
    cluster: dict[str, Any], rgb: np.ndarray, rgb_png: bytes, case: str, target: str
) -> None:
    client = grpcclient.InferenceServerClient(cluster[target])
    text, tensor = bad_inputs(grpcclient, rgb, rgb_png)[case]
    with pytest.raises(InferenceServerException) as caught:
        client.infer(MODEL, [tensor])
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT" and text in caught.value.message()
    with pytest.raises(InferenceServerException, match="no-such-model") as unknown:
        client.infer("no-such-model", [png_input(grpcclient, rgb_png)])
    assert unknown.value.status() == "StatusCode.NOT_FOUND"
    client.close()
    assert_healthy(cluster)


@pytest.mark.parametrize(
    ("body", "headers", "status", "text"),
    [
        (b'{"inputs": [', {}, 400, "not valid JSON"),
        (
            json.dumps({"inputs": [{"name": "image", "datatype": "FP33", "shape": [1], "data": [1]}]}).encode(),
            {},
            400,
            "unknown datatype 'FP33'",
        ),
        (b"{}", {"Inference-Header-Content-Length": "99"}, 400, "only 2 bytes"),
        (gzip.compress(b" " * (8 * 1024 * 1024)), {"Content-Encoding": "gzip"}, 413, "limit"),
        (b"{}", {"Content-Encoding": "br"}, 415, "gzip or deflate"),
        (  # 13 s of big-int work on the event loop before shapes were capped; 4 KB compressed
            gzip.compress(
                json.dumps({"inputs": [{"name": "image", "datatype": "UINT8", "shape": [10**18] * 40000}]}).encode()
            ),
            {"Content-Encoding": "gzip"},
            400,
            "40000 dimensions; at most 16",
        ),
        (b"[" * 100_000, {}, 400, "nested too deeply"),
        (b'{"inputs": [' + b"1" * 5000 + b"]}", {}, 400, "not valid JSON"),
        (b"{}", {"Inference-Header-Content-Length": "1" * 40}, 400, "byte count"),
        (
            json.dumps({"inputs": [{"name": "image", "datatype": "UINT8", "shape": [0, 10**20], "data": []}]}).encode(),
            {},
            400,
            "does not fit int64",
        ),
        (
            json.dumps(
                {"inputs": [{"name": "image", "datatype": "UINT8", "shape": [1], "data": [1]}], "parameters": HUGE}
            ).encode(),
            {},
            400,
            "does not fit int64",
        ),
        (gzip.compress(b"{}", mtime=0) + b"trailing", {"Content-Encoding": "gzip"}, 400, "trailing data"),
    ],
)
def test_raw_rest_errors_are_json_with_a_message(
    cluster: dict[str, Any], body: bytes, headers: dict[str, str], status: int, text: str
) -> None:
    with httpx.Client(http2=True, http1=False, timeout=30) as client:
        reply = client.post(f"{cluster['url']}/v2/models/{MODEL}/infer", content=body, headers=headers)
    assert reply.status_code == status, reply.text
    assert text in reply.json()["error"]
    assert_healthy(cluster)


def test_statistics_count_requests_through_the_gateway(cluster: dict[str, Any], rgb_png: bytes) -> None:
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    before = client.get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
    client.infer(MODEL, [png_input(grpcclient, rgb_png)])
    after = client.get_inference_statistics(MODEL, as_json=True)["model_stats"][0]
    assert int(after["inference_count"]) == int(before.get("inference_count", 0)) + 1
    assert client.get_model_config(MODEL).config.name == MODEL
    client.close()


def test_grpc_inference_is_counted_in_the_gateway_metrics(cluster: dict[str, Any], rgb_png: bytes) -> None:
    route = 'route="/inference.GRPCInferenceService/ModelInfer"'

    def answered() -> float:
        text = httpx.get(f"{cluster['url']}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("depthserve_gateway_requests_total{") and route in line and 'code="200"' in line
        )

    before = answered()
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    for _ in range(3):
        client.infer(MODEL, [png_input(grpcclient, rgb_png)])
    assert answered() == before + 3


def test_grpc_stream_infer_answers_each_request_and_reports_errors_on_the_stream(
    cluster: dict[str, Any], rgb: np.ndarray, rgb_png: bytes
) -> None:
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    for index in range(4):
        client.async_stream_infer(MODEL, [png_input(grpcclient, rgb_png)], request_id=f"r{index}")
    _, floats = bad_inputs(grpcclient, rgb, rgb_png)["bad datatype"]
    client.async_stream_infer(MODEL, [floats], request_id="bad")
    client.async_stream_infer(MODEL, [png_input(grpcclient, rgb_png)], request_id="after")  # the stream lives on
    answers = [results.get(timeout=60) for _ in range(6)]
    client.stop_stream()
    client.close()
    good = {result.get_response().id: result for result, error in answers if error is None}
    errors = [error for _, error in answers if error is not None]
    assert set(good) == {"r0", "r1", "r2", "r3", "after"}
    for result in good.values():
        assert_matches_v1(cluster, result.as_numpy("depth"))
    assert len(errors) == 1 and "UINT8" in errors[0].message()
    assert_healthy(cluster)


LONG = "m" * 300


@pytest.mark.parametrize("path", ["", "/ready", "/config", "/stats", "/versions/1", "/versions/" + LONG])
def test_rest_model_names_past_the_cap_get_400(cluster: dict[str, Any], path: str) -> None:
    model = LONG if not path.startswith("/versions/" + LONG) else MODEL
    reply = httpx.get(f"{cluster['url']}/v2/models/{model}{path}", timeout=10)
    assert reply.status_code == 400, reply.text
    assert "at most 256" in reply.json()["error"] and len(reply.text) < 1000
    infer = httpx.post(f"{cluster['url']}/v2/models/{LONG}/infer", content=b"{}", timeout=10)
    assert infer.status_code == 400 and "at most 256" in infer.json()["error"]


def test_grpc_model_names_past_the_cap_are_invalid_argument_without_retries(
    cluster: dict[str, Any], rgb_png: bytes
) -> None:
    def retries() -> list[str]:
        text = httpx.get(f"{cluster['url']}/metrics", timeout=10).text
        return [line for line in text.splitlines() if line.startswith("depthserve_gateway_retries")]

    before = retries()
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    calls = [
        lambda: client.get_model_metadata(LONG),
        lambda: client.is_model_ready(LONG),
        lambda: client.get_model_config(MODEL, LONG),
        lambda: client.get_inference_statistics(LONG),
        lambda: client.infer(LONG, [png_input(grpcclient, rgb_png)]),
        lambda: client.infer(MODEL, [png_input(grpcclient, rgb_png)], model_version=LONG),
        # the worker quotes a bad format back; 100 KB of it overflowed gRPC metadata: RESOURCE_EXHAUSTED, retried
        lambda: client.infer(MODEL, [png_input(grpcclient, rgb_png)], parameters={"format": "x" * 100_000}),
    ]
    for call in calls:
        with pytest.raises(InferenceServerException) as caught:
            call()
        assert caught.value.status() == "StatusCode.INVALID_ARGUMENT" and "at most" in caught.value.message()
    client.close()
    assert retries() == before  # refused at the gateway: no backend saw the name, nothing was retried
    assert_healthy(cluster)


def test_made_up_model_names_add_no_statistics_rows(cluster: dict[str, Any], rgb_png: bytes) -> None:
    client = httpclient.InferenceServerClient(cluster["http"])
    for index in range(20):
        with pytest.raises(InferenceServerException) as caught:
            client.infer(f"made-up-{index}", [png_input(httpclient, rgb_png)])
        assert caught.value.status() == "404"
    client.infer(MODEL, [png_input(httpclient, rgb_png)])
    names = {row["name"] for row in client.get_inference_statistics()["model_stats"]}
    assert names == {MODEL}
    client.close()


def test_a_cancelled_stream_ends_every_request_without_tracebacks(cluster: dict[str, Any], rgb_png: bytes) -> None:
    before = len(cluster["gateway"].output())
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    for index in range(40):  # more than a stream's window: the rest wait in gRPC flow control
        client.async_stream_infer(MODEL, [png_input(grpcclient, rgb_png)], request_id=f"c{index}")
    results.get(timeout=60)  # some are running
    client.stop_stream(cancel_requests=True)
    client.close()
    assert_healthy(cluster)
    again = grpcclient.InferenceServerClient(cluster["grpc"])
    assert_matches_v1(cluster, again.infer(MODEL, [png_input(grpcclient, rgb_png)]).as_numpy("depth"))
    again.close()
    log = cluster["gateway"].output()[before:]
    assert "Traceback" not in log and "ExecuteBatchError" not in log, log[-3000:]


def test_a_stream_flooded_with_requests_stays_within_its_window(cluster: dict[str, Any], rgb_png: bytes) -> None:
    """80 requests at once on one stream: unbounded, they overflowed the worker's queue of 64 (RESOURCE_EXHAUSTED)."""
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(cluster["grpc"])
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    for index in range(80):
        client.async_stream_infer(MODEL, [png_input(grpcclient, rgb_png)], request_id=f"f{index}")
    answers = [results.get(timeout=120) for _ in range(80)]
    client.stop_stream()
    client.close()
    assert [error for _, error in answers if error is not None] == []
    assert {result.get_response().id for result, _ in answers} == {f"f{index}" for index in range(80)}


def test_model_config_leaves_the_worker_log_clean(cluster: dict[str, Any]) -> None:
    """Every GET .../config used to log a NotImplementedError traceback on the worker, at ERROR."""
    before = len(cluster["worker"].output())
    for _ in range(3):
        reply = httpx.get(f"{cluster['url']}/v2/models/{MODEL}/config", timeout=30)
        assert reply.status_code == 200 and reply.json()["name"] == MODEL
    log = cluster["worker"].output()[before:]
    assert "Traceback" not in log and "NotImplementedError" not in log and "ERROR" not in log, log[-2000:]


def test_costly_oip_requests_are_refused_clearly_and_the_next_one_served(
    cluster: dict[str, Any], rgb_png: bytes
) -> None:
    """num_tokens past the model's range (the worker refuses), a 1 x 100,000 image tensor (the gateway refuses)."""
    sent = refused = 0
    client = httpclient.InferenceServerClient(cluster["http"])
    with pytest.raises(InferenceServerException, match="num_tokens must be between") as tokens:
        sent += 1
        client.infer(MODEL, [png_input(httpclient, rgb_png)], parameters={"num_tokens": 100_000})
    refused += 1
    assert tokens.value.status() == "400"
    wide = httpclient.InferInput("image", [1, 100_000, 3], "UINT8")
    wide.set_data_from_numpy(np.zeros((1, 100_000, 3), np.uint8), binary_data=True)
    with pytest.raises(InferenceServerException, match="aspect ratio of 1e\\+05:1") as narrow:
        sent += 1
        client.infer(MODEL, [wide])
    refused += 1
    assert narrow.value.status() == "400"
    client.close()
    grpc_client = grpcclient.InferenceServerClient(cluster["grpc"])
    wide_grpc = grpcclient.InferInput("image", [1, 100_000, 3], "UINT8")
    wide_grpc.set_data_from_numpy(np.zeros((1, 100_000, 3), np.uint8))
    with pytest.raises(InferenceServerException, match="aspect ratio") as over_grpc:
        sent += 1
        grpc_client.infer(MODEL, [wide_grpc])
    refused += 1
    assert over_grpc.value.status() == "StatusCode.INVALID_ARGUMENT"
    sent += 1
    assert_matches_v1(cluster, grpc_client.infer(MODEL, [png_input(grpcclient, rgb_png)]).as_numpy("depth"))
    grpc_client.close()
    assert (sent, refused) == (4, 3)
    assert_healthy(cluster)
