"""Logging set-up shared by gateway and worker: text or one JSON object per line, with the request id.

The request id travels in a context variable: the gateway sets it from `X-Request-Id` (or makes one),
sends it to the worker as gRPC metadata `x-request-id`, and the worker sets it again, so every log line
about one request, on every machine, carries the same id.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar
from typing import Literal

REQUEST_ID: ContextVar[str] = ContextVar("depthserve_request_id", default="")
LogFormat = Literal["text", "json"]
LEVELS = ("debug", "info", "warning", "error")
_RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "request_id", "asctime"}


class RequestIdFilter(logging.Filter):
    """Stamps each record with the request id of the context that logged it ('' outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Add `record.request_id`; never drops a record."""
        if not getattr(record, "request_id", ""):
            record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, request_id, extras and the exception."""

    def __init__(self, component: str) -> None:
        super().__init__()
        self._component = component

    def format(self, record: logging.LogRecord) -> str:
        """Render the record as a single line of JSON."""
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "component": self._component,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", "")
        if request_id:
            entry["request_id"] = request_id
        for key, value in record.__dict__.items():
            if key not in _RESERVED and not key.startswith("_"):
                entry[key] = value if isinstance(value, str | int | float | bool | None) else repr(value)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def granian_log_config(log_format: str) -> dict[str, object] | None:
    """Granian's own logger set-up with JSON lines too when asked (it configures its loggers itself)."""
    if log_format != "json":
        return None
    return {
        "formatters": {
            "generic": {"()": "depthserve.telemetry.logs.JsonFormatter", "component": "gateway"},
            "access": {"()": "logging.Formatter", "fmt": "%(message)s"},
        }
    }


def configure_logging(component: str, log_format: str = "text", level: str = "info") -> None:
    """Send logs to stderr in the chosen format and level, replacing any handlers set up before."""
    if log_format not in ("text", "json"):
        raise ValueError(f"log format must be text or json, got {log_format!r}")
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    if log_format == "json":
        handler.setFormatter(JsonFormatter(component))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    if level.lower() == "debug":
        for noisy in ("asyncio", "grpc", "httpx", "httpcore", "hpack", "PIL"):
            logging.getLogger(noisy).setLevel(logging.INFO)  # keep debug about depthserve, not its libraries
