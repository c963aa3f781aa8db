"""OpenTelemetry spans, on only when asked for: `pip install depthserve[otel]` and set OTEL_TRACES_EXPORTER.

Spans: `gateway.request` around an inference, `gateway.admission` while it waits for a slot (the queue),
`worker.infer` around a worker's ModelInfer. The gateway sends the W3C trace context to the worker in
gRPC metadata, so a request is one trace across processes; every span also carries the request id.
When tracing is off (the default) `span()` returns one shared no-op, so the hot path pays a function call.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import grpc

log = logging.getLogger("depthserve.telemetry")
_NOOP: AbstractContextManager[Any] = nullcontext()
_tracer: Any = None  # an opentelemetry Tracer once tracing is configured


def active() -> bool:
    """Whether spans are being recorded."""
    return _tracer is not None


def enable(provider: Any) -> None:
    """Record spans with this OpenTelemetry TracerProvider (configure_tracing builds one from the environment)."""
    global _tracer
    _tracer = provider.get_tracer("depthserve")


def configure_tracing(service: str) -> bool:
    """Turn tracing on when OTEL_TRACES_EXPORTER names `console` or `otlp` and the SDK is installed."""
    wanted = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if wanted in ("", "none"):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_TRACES_EXPORTER=%s but OpenTelemetry is not installed: pip install 'depthserve[otel]'", wanted
        )
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service)}))
    if wanted == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif wanted == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            log.warning("OTEL_TRACES_EXPORTER=otlp needs opentelemetry-exporter-otlp; tracing stays off")
            return False
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        log.warning("OTEL_TRACES_EXPORTER=%s is not supported here (console, otlp); tracing stays off", wanted)
        return False
    trace.set_tracer_provider(provider)
    enable(provider)
    log.info("OpenTelemetry tracing on (%s exporter)", wanted)
    return True


def span(
    name: str, request_id: str = "", carrier: Mapping[str, str] | None = None, **attributes: str | int | float
) -> AbstractContextManager[Any]:
    """Open a span (child of the trace context in `carrier`, if given), or give the shared no-op when off."""
    if _tracer is None:
        return _NOOP
    if request_id:
        attributes["depthserve.request_id"] = request_id
    context = None
    if carrier is not None:
        from opentelemetry import propagate

        context = propagate.extract(carrier)
    return _tracer.start_as_current_span(name, context=context, attributes=attributes)


class _InjectTraceContext(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds `traceparent` (W3C) to every outgoing call's metadata, so the worker's span joins the trace."""

    async def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Awaitable[Any]], client_call_details: Any, request: Any
    ) -> Any:
        from opentelemetry import propagate

        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if carrier:
            metadata = [*(client_call_details.metadata or ()), *carrier.items()]
            client_call_details = client_call_details._replace(metadata=grpc.aio.Metadata(*metadata))
        return await continuation(client_call_details, request)


def client_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """Interceptors for the gateway's backend channels: the trace-context injector when tracing is on, else none."""
    return [_InjectTraceContext()] if _tracer is not None else []
