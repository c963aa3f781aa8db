"""POST /v1/jobs with a video: the upload read to disk and probed (4xx at once), the job stored, then run here.

A job is a video job when its body is a video (`video/mp4`, `video/webm`, `video/quicktime`), or
multipart whose first part is named `video` (as for /v1/depth/video: optional `depth` and
`intrinsics` parts after it); the query takes the same options (`resolution_level`, `model`,
`stride`, `max_frames`, `format`, `dtype`). The probe's frame count is the job's `frames_total`
from the start. The job's limits (jobs per caller and in all, stored bytes) apply as for any job.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from starlette.types import Message, Receive, Scope

from depthserve.gateway.dispatch.forwarding import Forwarder, within_upload_time
from depthserve.gateway.dispatch.video_jobs import VideoJobs, VideoRun
from depthserve.gateway.edge.video_share import VideoShare
from depthserve.gateway.http.video_route import MIB, gateway_error, probed
from depthserve.gateway.http.video_upload import VIDEO_TYPES, read_video_upload
from depthserve.jobs.model import Job
from depthserve.jobs.service import JobService
from depthserve.settings import GatewaySettings
from depthserve.video.errors import VideoError
from depthserve.video.options import VideoLimits, parse_options
from depthserve.video.pipeline import VideoJob
from depthserve.video.progress import Progress

PEEK_BYTES = 16 * 1024  # the first part's headers must arrive within this many bytes to be looked at
_NAME = re.compile(rb'content-disposition:[^\r\n]*;\s*name="([^"]*)"', re.IGNORECASE)


async def first_part_name(receive: Receive) -> tuple[str | None, Receive]:
    """The name of a multipart body's first part (None if its headers are not in the first PEEK_BYTES), and a
    receive that gives the body again from its start."""
    taken: list[Message] = []
    seen = b""
    while len(seen) < PEEK_BYTES:
        message = await receive()
        taken.append(message)
        if message["type"] != "http.request":
            break
        seen += message.get("body", b"")
        if b"\r\n\r\n" in seen or not message.get("more_body", False):
            break
    head = seen.split(b"\r\n\r\n", 1)[0] if b"\r\n\r\n" in seen else b""
    match = _NAME.search(head)

    async def replay() -> Message:
        return taken.pop(0) if taken else await receive()

    return (match.group(1).decode("latin-1") if match else None), replay


async def is_video_job(headers: Mapping[str, str], receive: Receive) -> tuple[bool, Receive]:
    """Whether a job's body is a video (by content type, or a multipart body whose first part is `video`)."""
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type in VIDEO_TYPES:
        return True, receive
    if content_type != "multipart/form-data":
        return False, receive
    name, replay = await first_part_name(receive)
    return name == "video", replay


class VideoJobSubmission:
    """Reads, probes and stores a video job, then hands it to this gateway's VideoJobs."""

    def __init__(
        self, settings: GatewaySettings, jobs: JobService, forwarder: Forwarder, share: VideoShare, runner: VideoJobs
    ) -> None:
        self._settings = settings
        self._share = share
        self._jobs = jobs
        self._forwarder = forwarder
        self._runner = runner
        self._limits = VideoLimits.from_settings(settings)

    async def submit(
        self,
        scope: Scope,
        receive: Receive,
        headers: Mapping[str, str],
        query: Mapping[str, str],
        owner: str,
        idempotency_key: str | None,
    ) -> tuple[Job, bool]:
        """Read the upload to disk, probe it (400/406/413/415), store the job; True if new (then it runs)."""
        settings = self._settings
        model = query.get("model") or settings.model
        try:
            options = parse_options(query, headers.get("accept"))
        except VideoError as error:
            raise gateway_error(error) from None
        with self._forwarder.edge.uploads.lease(owner):
            reading = read_video_upload(
                scope, receive, headers, int(settings.video_max_body_mb * MIB), self._share.disk
            )
            upload = await within_upload_time(reading, settings.video_upload_timeout_s)
        try:
            info = await probed(upload, options, self._limits)
            described = {"video": {"options": vars(options), "frames": info.taken, "size": [info.width, info.height]}}
            job, created = await self._jobs.submit(
                model, lambda _: json.dumps(described).encode(), idempotency_key, owner, Progress(info.taken).snapshot()
            )
        except BaseException:
            await upload.close()
            raise
        if not created:
            await upload.close()  # an idempotent replay: the first upload's job runs
            return job, False
        video = VideoJob(upload.video, info, options, model, job.id, upload.depth, upload.intrinsics)
        self._runner.start(job.id, VideoRun(video, upload.close, owner, dict(headers)))
        return job, True
