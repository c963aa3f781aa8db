"""One video through the model: frames decoded, sent one inference each, results written back in order.

At most `window` frames are alive at once (decoded, at a worker, or done and waiting for an earlier
one): the decoder needs a credit per frame and gets it back when that frame is written. A frame's
result is written as soon as every earlier one is, so the reply streams at the pace of the workers.
Any failure (a frame that could not be served, data that stops decoding) ends the stream with
VideoError or the infer callable's own error; the frames not yet done are cancelled, their calls to
the workers too. Closing the stream early (a client that went away) cancels them the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from depthserve.protocol.depth_api import DepthInputs, build_request, read_encoded_result
from depthserve.video.decode import Frame, FrameReader
from depthserve.video.depth_frames import DepthFrames
from depthserve.video.mp4_output import Mp4Output
from depthserve.video.options import VideoOptions
from depthserve.video.outputs import FrameResult, NpzOutput, Output, ZipOutput
from depthserve.video.probe import VideoInfo
from depthserve.video.progress import Progress

InferFrame = Callable[[pb.ModelInferRequest, Frame], Awaitable[pb.ModelInferResponse]]
"""Run one frame's inference (admission, dispatch, retries): the gateway's path, or a test's."""
BUILD_ON_LOOP_PIXELS = 1 << 20  # larger frames are copied into their request in a thread


@dataclass(frozen=True)
class VideoJob:
    """Everything one video run needs: the file, what the probe found, the request's options and extras."""

    path: Path
    info: VideoInfo
    options: VideoOptions
    model: str
    request_id: str
    depth_path: Path | None = None
    intrinsics: np.ndarray | None = None


def make_output(job: VideoJob) -> Output:
    """The writer of the format asked for."""
    info, options = job.info, job.options
    if options.output == "npz":
        return NpzOutput(info.taken, info.height, info.width, options.dtype)
    if options.output == "mp4":
        return Mp4Output(info.height, info.width, info.fps / options.stride)
    return ZipOutput()


class _Requests:
    """Builds each frame's ModelInferRequest: RGB as a UINT8 tensor, raw depth when uploaded, the options."""

    def __init__(self, job: VideoJob, worker_format: str) -> None:
        self._job = job
        self._format = worker_format
        self._depth = None if job.depth_path is None else DepthFrames(job.depth_path, job.info)

    def build(self, frame: Frame) -> pb.ModelInferRequest:
        job = self._job
        inputs = DepthInputs(
            image=frame.rgb,
            depth=None if self._depth is None else self._depth.frame(frame.source),
            intrinsics=job.intrinsics,
            resolution_level=job.options.resolution_level,
            output_format=self._format,
        )
        return build_request(job.model, inputs, request_id=f"{job.request_id}:{frame.position}")

    async def request(self, frame: Frame) -> pb.ModelInferRequest:
        small = frame.rgb.shape[0] * frame.rgb.shape[1] <= BUILD_ON_LOOP_PIXELS and self._depth is None
        return self.build(frame) if small else await asyncio.to_thread(self.build, frame)

    def close(self) -> None:
        if self._depth is not None:
            self._depth.close()


async def _one(requests: _Requests, infer: InferFrame, frame: Frame) -> FrameResult:
    request = await requests.request(frame)
    reply = await infer(request, frame)
    data, _ = read_encoded_result(reply)
    return FrameResult(frame.position, frame.source, frame.time_s, data)


async def stream_video(
    job: VideoJob, infer: InferFrame, window: int, progress: Progress | None = None
) -> AsyncGenerator[bytes, None]:
    """The reply's bytes, in pieces, as frames finish in order; close it (aclosing) to stop early.

    The first piece carries the first frame's bytes (with the format's header), so a video that
    fails before any frame is done fails before anything was sent.
    """
    output = make_output(job)
    requests = _Requests(job, output.worker_format)
    reader = FrameReader(job.path, job.info, job.options, window)
    pending: deque[asyncio.Task[FrameResult]] = deque()
    frames = reader.frames()
    next_frame: asyncio.Task[Frame] | None = asyncio.ensure_future(anext(frames))
    head = output.start()
    finished = False
    try:
        while next_frame is not None or pending:
            waiting: list[asyncio.Future[object]] = [pending[0]] if pending else []  # type: ignore[list-item]
            if next_frame is not None:
                waiting.append(next_frame)  # type: ignore[arg-type]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if next_frame is not None and next_frame.done():
                try:
                    frame = next_frame.result()
                except StopAsyncIteration:
                    next_frame = None
                else:
                    pending.append(asyncio.ensure_future(_one(requests, infer, frame)))
                    next_frame = asyncio.ensure_future(anext(frames))
            while pending and pending[0].done():
                result = pending.popleft().result()
                piece = head + await output.add(result)
                head = b""
                reader.release()
                if progress is not None:
                    progress.frame_done()
                if piece:
                    yield piece
        yield head + await output.finish()
        finished = True
    finally:
        leftovers = [task for task in (*pending, next_frame) if task is not None]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
        with contextlib.suppress(Exception):
            await frames.aclose()
        await reader.close()
        requests.close()
        if not finished:
            await output.abort()
