"""JSON log lines carry the request id of the request that logged them, and are one parseable object each."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from depthserve.telemetry.logs import REQUEST_ID, JsonFormatter, RequestIdFilter, configure_logging


def test_json_lines_carry_the_request_id_of_their_task() -> None:
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Collect()
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter("gateway"))
    logger = logging.getLogger("depthserve.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    async def request(request_id: str) -> None:
        REQUEST_ID.set(request_id)
        await asyncio.sleep(0)
        logger.info("served %s", request_id, extra={"duration_ms": 1.5})

    async def main() -> None:
        await asyncio.gather(request("a-1"), request("b-2"))

    try:
        asyncio.run(main())
        logger.info("outside any request")
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in records]
    assert [(line["request_id"], line["message"]) for line in lines[:2]] == [
        ("a-1", "served a-1"),
        ("b-2", "served b-2"),
    ]
    assert lines[0]["duration_ms"] == 1.5 and lines[0]["component"] == "gateway" and lines[0]["level"] == "info"
    assert "request_id" not in lines[2]


def test_bad_format_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="json"):
        configure_logging("worker", "xml", "info")
    with pytest.raises(ValueError, match="level"):
        configure_logging("worker", "json", "loud")
