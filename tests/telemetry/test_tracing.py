"""With OpenTelemetry installed and OTEL_TRACES_EXPORTER set, one request is one trace across gateway and worker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from depthserve.telemetry import tracing
from depthserve.testing.observed import observed_cluster


def spans_in(output: str) -> list[dict[str, object]]:
    """The spans the console exporter printed (indented JSON objects) among the log lines."""
    decoder = json.JSONDecoder()
    spans = []
    start = output.find('{\n    "name"')
    while start != -1:
        span, end = decoder.raw_decode(output, start)
        spans.append(span)
        start = output.find('{\n    "name"', end)
    return spans


@pytest.mark.slow
def test_gateway_and_worker_spans_share_one_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the optional extra depthserve[otel] is not installed")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")  # the child processes inherit it
    with observed_cluster(tmp_path, workers=1) as cluster:
        (reply,) = cluster.send(1, request_id="traced-7")
        assert reply.status_code == 200
        worker = next(iter(cluster.workers.values()))
    by_name: dict[str, dict[str, object]] = {}
    for span in spans_in(cluster.gateway.output()) + spans_in(worker.output()):
        attributes = span.get("attributes") or {}
        assert isinstance(attributes, dict)
        if attributes.get("depthserve.request_id") == "traced-7" or span["name"] == "gateway.admission":
            by_name[str(span["name"])] = span
    assert {"gateway.request", "gateway.admission", "worker.infer"} <= set(by_name), sorted(by_name)
    traces = {name: span["context"]["trace_id"] for name, span in by_name.items()}  # type: ignore[index]
    assert traces["worker.infer"] == traces["gateway.request"] == traces["gateway.admission"]


def test_tracing_is_off_without_an_exporter() -> None:
    assert not tracing.active()
    assert tracing.span("gateway.request", "id") is tracing.span("worker.infer")  # the shared no-op
