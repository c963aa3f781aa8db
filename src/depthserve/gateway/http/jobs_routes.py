"""The async job API: POST /v1/jobs, GET|DELETE /v1/jobs/{id}, GET|DELETE /v1/jobs/{id}/result.

A job takes the same inputs as POST /v1/depth (parsed by the same function) and answers 202 at once;
the output format is chosen at submission (Accept or ?format=), as for /v1/depth.

A job belongs to its caller: the API key name, or the client address without API keys. Idempotency
keys are scoped by caller, so one caller's key never finds another's job (without API keys, clients
behind one proxy address share a scope). With API keys, another caller asking for the job gets 404,
as for a job that does not exist; without them, the unguessable id is what guards a job. Each caller
has limits on jobs queued or running and on bytes kept (jobs/quota.py): 429 past its own, 503 past
the gateway's; DELETE /v1/jobs/{id}/result forgets a fetched result and frees its bytes at once.

A video body makes a video job (video_job_submit.py), run by this gateway: its status shows
`progress`, and a video job whose gateway fell silent is failed on the next look at it. Results are
streamed from the store in pieces (a video's may be gigabytes), with their length up front, so a
result cut short by a delete meanwhile is an incomplete reply, never a shorter file.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from depthserve.gateway.dispatch.forwarding import within_upload_time
from depthserve.gateway.dispatch.video_jobs import silent_error
from depthserve.gateway.edge.edge import Edge
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import header_map, send_bytes
from depthserve.gateway.http.depth_route import parse_depth_upload
from depthserve.gateway.http.error_boundary import ErrorBoundary, request_id_of
from depthserve.gateway.http.video_job_submit import VideoJobSubmission, is_video_job
from depthserve.jobs.errors import BrokerUnavailable, JobConflict, JobError, JobNotFound, QuotaExceeded
from depthserve.jobs.model import Job, valid_job_id
from depthserve.jobs.payloads import encode_payload
from depthserve.jobs.service import JobService
from depthserve.jobs.store import StoredResult
from depthserve.settings import GatewaySettings

log = logging.getLogger("depthserve.gateway")
MAX_KEY_LENGTH = 200


def job_error(exc: JobError) -> GatewayError:
    """The HTTP answer for a job error: 404 unknown/expired, 409 wrong state, 429/503 over a job limit, 503 down."""
    if isinstance(exc, JobNotFound):
        return GatewayError(404, "job_not_found", str(exc))
    if isinstance(exc, JobConflict):
        return GatewayError(409, f"job_{exc.state}", str(exc))
    if isinstance(exc, QuotaExceeded):
        if exc.scope == "caller":
            return GatewayError(429, "job_quota", str(exc), retry_after=exc.retry_after_s)
        return GatewayError(503, "jobs_full", str(exc), retry_after=exc.retry_after_s)
    return GatewayError(503, "broker_unavailable", f"job broker unavailable: {exc}", retry_after=1.0)


def idempotency_key(raw: str | None) -> str | None:
    """The client's Idempotency-Key, if it is printable ASCII of sane length (else 400)."""
    if raw is None:
        return None
    if not raw or len(raw) > MAX_KEY_LENGTH or not raw.isascii() or not raw.isprintable():
        raise GatewayError(
            400, "invalid_request", f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable ASCII characters"
        )
    return raw


def job_owner(edge: Edge, headers: Mapping[str, str], client_host: str | None) -> str:
    """Authenticate and rate-limit like /v1/depth; the caller owning the jobs (API key name, else "addr:HOST")."""
    return edge.caller(headers, client_host)


def not_found(job_id: str) -> JobNotFound:
    """The 404 for an unknown, expired, malformed or someone else's job: all look the same to the caller."""
    return JobNotFound(f"no job {job_id[:64]!r} (unknown, or its results expired)")


class SubmitJob:
    """The bare ASGI app behind POST /v1/jobs: check, read the upload, store and publish, answer 202."""

    def __init__(self, settings: GatewaySettings, jobs: JobService, edge: Edge, videos: VideoJobSubmission) -> None:
        self._settings = settings
        self._jobs = jobs
        self._edge = edge
        self._videos = videos

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = header_map(scope["headers"])
        request_id = request_id_of(scope)
        try:
            if scope["method"] != "POST":
                raise GatewayError(405, "method_not_allowed", "use POST /v1/jobs to submit, GET /v1/jobs/{id} to look")
            client = scope.get("client")
            owner = job_owner(self._edge, headers, client[0] if client else None)
            await self._jobs.check_room(owner)  # a caller at its limits is refused before its upload is read
            query = dict(parse_qsl(scope["query_string"].decode("latin-1")))
            model = query.get("model") or self._settings.model
            key = idempotency_key(headers.get("idempotency-key"))
            scoped_key = None if key is None else f"{owner}:{key}"  # one caller's key never finds another's job
            video, receive = await is_video_job(headers, receive)
            if video:
                job, created = await self._videos.submit(scope, receive, headers, query, owner, scoped_key)
                await self._accepted(send, job, created, request_id)
                return
            with self._edge.uploads.lease(owner) as lease:  # counted against its client's budget while read
                reading = parse_depth_upload(scope, receive, headers, query, self._settings, lease)
                inputs = await within_upload_time(reading, self._settings.upload_timeout_s)
            try:
                job, created = await self._jobs.submit(
                    model, lambda job_id: encode_payload(model, inputs, job_id), scoped_key, owner
                )
            except JobError as exc:
                raise job_error(exc) from None
        except JobError as exc:
            raise job_error(exc) from None
        await self._accepted(send, job, created, request_id)

    @staticmethod
    async def _accepted(send: Send, job: Job, created: bool, request_id: str) -> None:
        status_url = f"/v1/jobs/{job.id}"
        body = JSONResponse({"id": job.id, "status_url": status_url, "state": job.state.value}).body
        extra = {"location": status_url, "x-request-id": request_id}
        if not created:
            extra["idempotent-replayed"] = "true"
        await send_bytes(send, 202 if created else 200, bytes(body), "application/json", extra)


def _accepts(accept: str | None, content_type: str) -> bool:
    """Whether an Accept header admits the stored result's media type."""
    if accept is None or not accept.strip():
        return True
    major = content_type.split("/")[0]
    for item in accept.split(","):
        media = item.split(";")[0].strip().lower()
        if media in ("*/*", f"{major}/*", content_type.lower()):
            return True
    return False


async def _exactly(stored: StoredResult) -> AsyncIterator[bytes]:
    """The result's pieces; one that ends short (deleted while read) raises, so the reply is cut, not shorter."""
    sent = 0
    async for piece in stored.chunks:
        sent += len(piece)
        yield piece
    if sent != stored.size:
        raise JobNotFound(f"the result was deleted while it was read ({sent} of {stored.size} bytes sent)")


def job_routes(settings: GatewaySettings, jobs: JobService, edge: Edge, videos: VideoJobSubmission) -> list[Route]:
    """The routes of the job API, each behind the API key and rate limit like /v1/depth."""

    async def owned(request: Request) -> Job:
        """Check the caller, then give its job; 404 for a malformed id (no lookup) or another caller's job."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        owner = job_owner(edge, headers, request.client.host if request.client else None)
        jobs.check_ready()
        job_id = request.path_params["job_id"]
        if not valid_job_id(job_id):
            raise not_found(job_id)
        job = await jobs.store.get(job_id)
        if edge.keys.enabled and job.owner != owner:
            raise not_found(job_id)
        silent_s = settings.job_visibility_timeout_s
        if job.kind == "video" and not job.final and await jobs.store.abandon(job_id, silent_error(silent_s), silent_s):
            job = await jobs.store.get(job_id)  # its gateway died with the video: failed now, clearly
        return job

    async def status(request: Request) -> Response:
        """Describe a job: state, attempts, timestamps, error."""
        try:
            job = await owned(request)
            if request.method == "DELETE":
                job = await jobs.store.cancel(job.id)
        except JobError as exc:  # the answer is given by the app's error handlers, as for a GatewayError
            raise job_error(exc) from None
        return JSONResponse(job.public(f"/v1/jobs/{job.id}"))

    async def result(request: Request) -> Response:
        """Pass back a succeeded job's result file (format chosen at submission); DELETE forgets an ended job."""
        try:
            job = await owned(request)
            if request.method == "DELETE":
                await jobs.store.delete(job.id)
                return Response(status_code=204)
            stored = await jobs.store.open_result(job.id)
        except JobError as exc:  # the answer is given by the app's error handlers, as for a GatewayError
            raise job_error(exc) from None
        content_type = stored.content_type
        if not _accepts(request.headers.get("accept"), content_type):
            await stored.chunks.aclose()  # type: ignore[attr-defined]  # an async generator: nothing read yet
            message = f"this job's result is {content_type}; choose the format when submitting (Accept or ?format=)"
            return GatewayError(406, "unsupported_format", message).response()
        length = {"content-length": str(stored.size)}
        return StreamingResponse(_exactly(stored), 200, headers=length, media_type=content_type)

    return [
        Route("/v1/jobs", ErrorBoundary(SubmitJob(settings, jobs, edge, videos), "job submission")),
        Route("/v1/jobs/{job_id}", status, methods=["GET", "DELETE"]),
        Route("/v1/jobs/{job_id}/result", result, methods=["GET", "DELETE"]),
    ]


__all__ = ["BrokerUnavailable", "SubmitJob", "job_routes"]
