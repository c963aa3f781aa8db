"""The one error boundary: a GatewayError is its JSON answer, anything else a logged 500, never a second answer."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from starlette.types import Message, Receive, Scope, Send

from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.error_boundary import ErrorBoundary


def scope() -> Scope:
    return {"type": "http", "http_version": "1.1", "method": "POST", "headers": [(b"x-request-id", b"r-1")]}


def run(app: ErrorBoundary) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(app(scope(), receive, send))
    return sent


def answer(sent: list[Message]) -> tuple[int, dict[str, str], dict[bytes, bytes]]:
    start, body = sent
    return start["status"], json.loads(body["body"]), dict(start["headers"])


def test_a_gateway_error_is_its_json_answer_with_the_request_id() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise GatewayError(503, "queue_full", "full", retry_after=2.0)

    status, body, headers = answer(run(ErrorBoundary(app, "test")))
    assert (status, body["reason"]) == (503, "queue_full")
    assert headers[b"x-request-id"] == b"r-1" and headers[b"retry-after"] == b"2"


def test_anything_else_is_a_logged_500(caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("a bug")

    with caplog.at_level(logging.ERROR, "depthserve.gateway"):
        status, body, _ = answer(run(ErrorBoundary(app, "test request")))
    assert (status, body["reason"]) == (500, "internal") and "a bug" not in body["error"]
    assert "test request r-1 failed" in caplog.text and "RuntimeError: a bug" in caplog.text


def test_a_failure_after_the_answer_started_sends_nothing_more(caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("mid-reply")

    with caplog.at_level(logging.ERROR, "depthserve.gateway"):
        sent = run(ErrorBoundary(app, "test"))
    assert [m["type"] for m in sent] == ["http.response.start"] and "mid-reply" in caplog.text
