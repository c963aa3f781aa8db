"""POST /v1/depth/video: depth for every frame of a video, streamed back in frame order as frames finish.

Upload to disk, probe (400/413/415 before any reply), then frames fan out through the normal
dispatch path under the video share (edge/video_share.py), and the reply streams as each frame's
result is written in order. The reply starts with the first frame done, so a video that fails
before then gets a JSON error; one that fails later (data that stops decoding, a frame no worker
could serve) has its reply cut short, never closed as if complete: the zip or npz lacks its central
directory, so it does not open, and the client's HTTP library reports an incomplete body. A client
that goes away cancels the frames not yet done, their calls to workers included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from urllib.parse import parse_qsl

from starlette.types import Receive, Scope, Send

from depthserve.gateway.dispatch.forwarding import Forwarder, within_upload_time
from depthserve.gateway.dispatch.frame_dispatch import frame_infer
from depthserve.gateway.edge.reply_budget import PIECE_BYTES, connection_of
from depthserve.gateway.edge.video_share import VideoShare
from depthserve.gateway.errors import GatewayError
from depthserve.gateway.http.asgi_io import header_map, raw_headers, send_piece
from depthserve.gateway.http.error_boundary import request_id_of
from depthserve.gateway.http.video_upload import VideoUpload, read_video_upload
from depthserve.gateway.metrics import MODEL_KEY
from depthserve.settings import GatewaySettings
from depthserve.video.depth_frames import DepthFrames
from depthserve.video.errors import VideoError
from depthserve.video.options import VideoLimits, VideoOptions, parse_options
from depthserve.video.pipeline import VideoJob, stream_video
from depthserve.video.probe import VideoInfo, probe
from depthserve.video.progress import Progress

log = logging.getLogger("depthserve.gateway")
MIB = 1024 * 1024
SUFFIX = {"zip": "zip", "npz": "npz", "mp4": "mp4"}


def gateway_error(error: VideoError) -> GatewayError:
    """The HTTP answer for a video refused or failed."""
    return GatewayError(error.status, error.reason, error.message)


async def probed(upload: VideoUpload, options: VideoOptions, limits: VideoLimits) -> VideoInfo:
    """Probe the upload and check its depth frames, in a thread; VideoError becomes its 4xx."""

    def check() -> VideoInfo:
        info = probe(upload.video, options, limits)
        if upload.depth is not None:
            DepthFrames(upload.depth, info).close()
        return info

    try:
        return await asyncio.to_thread(check)
    except VideoError as error:
        raise gateway_error(error) from None


class VideoEndpoint:
    """The bare ASGI app behind POST /v1/depth/video."""

    def __init__(self, settings: GatewaySettings, forwarder: Forwarder, share: VideoShare) -> None:
        self._settings = settings
        self._forwarder = forwarder
        self._share = share
        self._limits = VideoLimits.from_settings(settings)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one video; what it raises before the reply starts is answered by the ErrorBoundary around it."""
        request_id = request_id_of(scope)
        if scope["method"] != "POST":
            raise GatewayError(405, "method_not_allowed", "use POST /v1/depth/video")
        headers = header_map(scope["headers"])
        edge = self._forwarder.edge
        edge.replies.check(connection_of(scope))
        query = dict(parse_qsl(scope["query_string"].decode("latin-1")))
        model = scope[MODEL_KEY] = query.get("model") or self._settings.model
        try:
            options = parse_options(query, headers.get("accept"))
        except VideoError as error:
            raise gateway_error(error) from None
        client = scope.get("client")
        who = edge.caller(headers, client[0] if client else None)
        settings = self._settings
        with self._share.video(), edge.uploads.lease(who):
            reading = read_video_upload(
                scope, receive, headers, int(settings.video_max_body_mb * MIB), self._share.disk
            )
            upload = await within_upload_time(reading, settings.video_upload_timeout_s)
            try:
                info = await probed(upload, options, self._limits)
                job = VideoJob(upload.video, info, options, model, request_id, upload.depth, upload.intrinsics)
                infer = frame_infer(
                    self._forwarder.dispatcher, edge, self._share, model, who, headers, settings.video_frame_timeout_s
                )
                pieces = stream_video(job, infer, self._limits.window, Progress(info.taken))
                async with contextlib.aclosing(pieces):
                    await self._reply(scope, receive, send, job, pieces)
            finally:
                await upload.close()

    async def _reply(
        self, scope: Scope, receive: Receive, send: Send, job: VideoJob, pieces: AsyncGenerator[bytes, None]
    ) -> None:
        """Stream the pieces; stop (cancelling the frames left) when the client goes away or stops reading."""
        gone = asyncio.ensure_future(receive())  # the body was read: the next message is http.disconnect
        pump = asyncio.ensure_future(self._pump(send, job, pieces))
        try:
            await asyncio.wait((gone, pump), return_when=asyncio.FIRST_COMPLETED)
            if not pump.done():
                log.info("video %s: client went away; the frames left are cancelled", job.request_id)
                pump.cancel()
                await asyncio.gather(pump, return_exceptions=True)
                return
            pump.result()
        finally:
            gone.cancel()

    async def _pump(self, send: Send, job: VideoJob, pieces: AsyncGenerator[bytes, None]) -> None:
        started = False
        timeout = self._settings.reply_write_timeout_s
        try:
            async for piece in pieces:
                if not started:
                    await send({"type": "http.response.start", "status": 200, "headers": self._headers(job)})
                    started = True
                for start in range(0, len(piece), PIECE_BYTES):
                    await send_piece(send, piece[start : start + PIECE_BYTES], timeout)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except VideoError as error:
            if started:
                log.warning(
                    "video %s failed after its reply started: %s; reply cut short", job.request_id, error.message
                )
            raise gateway_error(error) from None
        except GatewayError as error:
            if started:
                log.warning(
                    "video %s failed after its reply started: %s; reply cut short", job.request_id, error.message
                )
            raise
        except TimeoutError:
            log.info("video %s: the client read nothing for %gs; reply abandoned", job.request_id, timeout)
            raise

    def _headers(self, job: VideoJob) -> list[tuple[bytes, bytes]]:
        info, options = job.info, job.options
        extra = {
            "x-request-id": job.request_id,
            "x-video-frames": str(info.taken),
            "x-video-size": f"{info.width}x{info.height}",
            "content-disposition": f'attachment; filename="depth.{SUFFIX[options.output]}"',
        }
        if options.output == "npz":
            extra["x-video-dtype"] = options.dtype
        return raw_headers(options.media_type, extra)
