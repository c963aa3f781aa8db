"""The one path every inference takes, whatever protocol it came in on: key, rate limit, admission, dispatch.

`/v1/depth`, OIP REST and OIP gRPC differ only in how they read a request and write a reply; the
checks and the deadline arithmetic between those two steps live here, once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from types import CoroutineType, coroutine
from typing import Any, TypeVar, cast

from depthserve.balancer.types import RequestInfo
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.edge.edge import Edge
from depthserve.gateway.edge.upload_budget import UploadLease
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.upstream.transport import InferRequest, InferResponse
from depthserve.protocol.depth_api import HIGH_PRIORITY
from depthserve.protocol.infer_wire import priority_of, with_priority
from depthserve.settings import GatewaySettings

T = TypeVar("T")
BuildRequest = Callable[[UploadLease], Awaitable[InferRequest]]  # reads the body, counting it on the lease
MIN_REQUEST_TIMEOUT_S = 0.001  # a shorter deadline could only ever time out: refused as unusable


def request_timeout(headers: Mapping[str, str], settings: GatewaySettings) -> float:
    """The request's deadline: `X-Request-Timeout` seconds if given (1 ms up to the cap), else the default."""
    raw = headers.get("x-request-timeout")
    if raw is None:
        return settings.request_timeout_s
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not MIN_REQUEST_TIMEOUT_S <= value <= settings.max_request_timeout_s:
        raise GatewayError(
            400,
            "invalid_request",
            f"X-Request-Timeout must be seconds from {MIN_REQUEST_TIMEOUT_S:g} to "
            f"{settings.max_request_timeout_s:g}, got {raw[:40]!r}",
        )
    return value


class Forwarder:
    """Admits one inference and sends it to a backend, reading its body first, under its client's upload budget."""

    def __init__(self, settings: GatewaySettings, dispatcher: Dispatcher, edge: Edge) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.edge = edge

    async def forward(
        self,
        model: str,
        headers: Mapping[str, str],
        client: str | None,
        request_id: str,
        timeout_s: float | None,
        build: BuildRequest,
        version: str = "",
    ) -> tuple[InferResponse, str]:
        """Check key and rate limit, `build(lease)` the request under the upload budget and timeout, admit, dispatch.

        The body is read before an admission slot is asked for, so a slow or stalled upload holds only its
        own client's upload budget (and the bytes that really arrived), never a slot other clients need.
        The body's bytes stay counted until the reply is in. `timeout_s` None reads X-Request-Timeout.
        Gives the reply and the backend that answered; every refusal is a GatewayError.
        """
        edge = self.edge
        who = edge.caller(headers, client)
        if timeout_s is None:
            timeout_s = request_timeout(headers, self.settings)
        deadline = edge.clock() + timeout_s
        priority = edge.priority(headers)  # a bad X-Priority is a 400 before the body is read
        info = RequestInfo(model=model, headers=headers, client=client or "", version=version)
        lane = self.dispatcher.lane(info)  # the backend a hash policy binds it to: its capacity caps the request
        edge.admission.check_door(model, deadline, who, lane)  # a client over its queue budget: its body is not read
        with edge.uploads.lease(who) as lease:
            request = await self._upload(build, lease, deadline, timeout_s)
            async with edge.admission.admit(model, deadline, priority, who, lane) as express:
                request = for_worker(request, express)
                left = deadline - edge.clock()
                return await self.dispatcher.infer(request, info, left, request_id, timeout_s)

    async def _upload(self, build: BuildRequest, lease: UploadLease, deadline: float, timeout_s: float) -> InferRequest:
        """Run `build` under the upload timeout (408), or the request's deadline if that comes first (504)."""
        clock = self.edge.clock
        request = await within_upload_time(build(lease), self.settings.upload_timeout_s, deadline - clock(), timeout_s)
        if deadline - clock() <= 0:
            raise GatewayError(504, "deadline", f"deadline of {timeout_s:g}s passed during the upload")
        return request


def for_worker(request: InferRequest, express: bool) -> InferRequest:
    """The request as a worker should rank it: an express slot's at the front of its queue. A client may ask
    to wait (OIP priority 2 and up) but never for the front itself: its priority 1 goes as the default."""
    if express:
        return with_priority(request, HIGH_PRIORITY)
    if priority_of(request) == HIGH_PRIORITY:
        return with_priority(request, 0)
    return request


async def within_upload_time(
    reading: Awaitable[T], upload_timeout_s: float, deadline_left_s: float | None = None, timeout_s: float = 0.0
) -> T:
    """Await an upload under the upload timeout (408), or the request's deadline if that comes first (504).

    A body that is in already (a gRPC message, a small REST body the server read with its headers) is read
    without suspending: its first step finishes it and no timer is armed, since none could fire before it.
    """
    limit = upload_timeout_s if deadline_left_s is None else min(upload_timeout_s, max(0.0, deadline_left_s))
    try:
        if type(reading) is CoroutineType:
            try:
                waiting_on = reading.send(None)
            except StopIteration as done:
                return cast(T, done.value)
            reading = _finish(reading, waiting_on)
        async with asyncio.timeout(limit):
            return await reading
    except TimeoutError:
        if limit < upload_timeout_s:
            raise GatewayError(504, "deadline", f"deadline of {timeout_s:g}s passed during the upload") from None
        raise GatewayError(408, "upload_timeout", f"request body not received within {upload_timeout_s:g}s") from None


@coroutine
def _finish(reading: Coroutine[Any, Any, T], waiting_on: Any) -> Generator[Any, Any, T]:
    """Drive a coroutine that suspended on its first step to its end, as `await` would (what the task sends or
    throws goes to it), so the rest of it runs under the timeout."""
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:
            reading.close()
            raise
        except BaseException as error:  # noqa: BLE001 - a cancellation or whatever the task throws: passed on
            try:
                waiting_on = reading.throw(error)
            except StopIteration as done:
                return cast(T, done.value)
        else:
            try:
                waiting_on = reading.send(sent)
            except StopIteration as done:
                return cast(T, done.value)
