"""Video jobs, run by the gateway that holds their upload: frames through the dispatcher, the result into the store.

A video job is the work of POST /v1/depth/video done in the background: the upload stays on this
gateway's disk, its frames fan out through the dispatcher (a worker killed mid-video costs a retry of
its frames, never a frame), and the reply's bytes are appended to the job store a MiB at a time, so
the result is never whole in memory and any gateway sharing the store can serve it. Every second the
job's progress is written to its status, which is also its heartbeat. A gateway that stops (SIGTERM)
fails the jobs it holds, saying so; one that dies falls silent and the next look at such a job fails
it the same way (`abandon`, after `job_visibility_timeout_s`). A video job is never re-run elsewhere:
its video lived on the gateway that died. Never is a job left running for ever or a part of its
result presented as the whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from depthserve.gateway.dispatch.forwarding import Forwarder
from depthserve.gateway.dispatch.frame_dispatch import frame_infer
from depthserve.gateway.edge.video_share import VideoShare
from depthserve.gateway.errors import GatewayError
from depthserve.jobs.errors import BrokerUnavailable, JobConflict, JobNotFound, ResultNotStored
from depthserve.jobs.store import RUN, JobStore
from depthserve.settings import GatewaySettings
from depthserve.video.errors import VideoError
from depthserve.video.pipeline import VideoJob, stream_video
from depthserve.video.progress import Progress

log = logging.getLogger("depthserve.gateway")
REPORT_EVERY_S = 1.0  # progress (and heartbeat) writes, at most and at least this often
APPEND_BYTES = 1 << 20  # reply bytes gathered before one append to the store
STOPPED = "the gateway running this video job stopped before it finished; submit the video again"


def silent_error(silent_s: float) -> str:
    """The error of a video job whose gateway fell silent (it died with the video on its disk)."""
    return (
        f"the gateway running this video job fell silent for {silent_s:g}s (it stopped, and the video was on "
        "its disk); submit the video again"
    )


@dataclass(frozen=True)
class VideoRun:
    """One accepted video job: what the pipeline needs, who asked, and how to remove its upload after it."""

    job: VideoJob
    remove_upload: Callable[[], Awaitable[None]]
    caller: str
    headers: Mapping[str, str]


class VideoJobs:
    """Runs this gateway's video jobs, each in a task, waiting for a video place as long as it takes."""

    def __init__(self, settings: GatewaySettings, store: JobStore, forwarder: Forwarder, share: VideoShare) -> None:
        self._settings = settings
        self._store = store
        self._forwarder = forwarder
        self._share = share
        self._tasks: dict[str, asyncio.Task[None]] = {}

    @property
    def running(self) -> int:
        """Video jobs this gateway holds (waiting for a place or running)."""
        return len(self._tasks)

    def start(self, job_id: str, run: VideoRun) -> None:
        """Run an accepted (stored, queued) video job in the background."""
        task = asyncio.create_task(self._run(job_id, run), name=f"video-job-{job_id}")
        self._tasks[job_id] = task
        task.add_done_callback(lambda _: self._tasks.pop(job_id, None))

    async def close(self) -> None:
        """Stop every video job (each is failed, saying the gateway stopped) and wait until they have."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run(self, job_id: str, run: VideoRun) -> None:
        progress = Progress(run.job.info.taken)
        runner = asyncio.current_task()
        assert runner is not None
        reporter = asyncio.create_task(self._report(job_id, progress, runner))
        try:
            async with self._share.queued_video():
                if (await self._store.start(job_id, 1, self._settings.job_visibility_timeout_s)).action != RUN:
                    return  # cancelled while it waited, or failed by another gateway
                progress.restart()
                await self._produce(job_id, run, progress)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await self._store.abandon(job_id, STOPPED, 0.0)  # no-op when it ended already (why it was stopped)
            raise
        except (VideoError, GatewayError) as error:
            log.info("video job %s failed: %s", job_id, error.message)
            await self._fail(job_id, error.message)
        except ResultNotStored as refused:
            log.info("video job %s failed: %s", job_id, refused)  # the store failed the job itself
        except (JobConflict, JobNotFound):
            log.info("video job %s ended elsewhere while it ran", job_id)
        except BrokerUnavailable as exc:  # its heartbeat stops too: the next look at it fails it
            log.warning("video job %s: job store unavailable (%s)", job_id, exc)
        except Exception as exc:  # noqa: BLE001 - a bug fails this job, not the gateway
            log.exception("video job %s failed", job_id)
            await self._fail(job_id, f"internal error: {type(exc).__name__}")
        finally:
            reporter.cancel()
            await asyncio.gather(reporter, return_exceptions=True)
            await run.remove_upload()

    async def _fail(self, job_id: str, message: str) -> None:
        with contextlib.suppress(BrokerUnavailable, JobNotFound):
            await self._store.fail(job_id, message, final=True)

    async def _produce(self, job_id: str, run: VideoRun, progress: Progress) -> None:
        """Stream the video's reply into the store a MiB at a time, then make it the job's result."""
        settings, forwarder = self._settings, self._forwarder
        model = run.job.model
        infer = frame_infer(
            forwarder.dispatcher, forwarder.edge, self._share, model, run.caller, run.headers,
            settings.video_frame_timeout_s,
        )  # fmt: skip
        held = bytearray()
        pieces = stream_video(run.job, infer, settings.video_window, progress)
        async with contextlib.aclosing(pieces):
            async for piece in pieces:
                held += piece
                if len(held) >= APPEND_BYTES:
                    await self._store.append_result(job_id, bytes(held))
                    held.clear()
        if held:
            await self._store.append_result(job_id, bytes(held))
        await self._store.report(job_id, progress.snapshot())  # frames_done == frames_total in its final status
        await self._store.succeed_appended(job_id, run.job.options.media_type)

    async def _report(self, job_id: str, progress: Progress, runner: asyncio.Task[None]) -> None:
        """Write progress every second; stop the job's runner once the job ended elsewhere (abandoned, deleted)."""
        while True:
            try:
                alive = await self._store.report(job_id, progress.snapshot())
            except BrokerUnavailable as exc:
                log.warning("video job %s: cannot record its progress: %s", job_id, exc)
                alive = True
            if not alive:
                log.info("video job %s ended elsewhere; its frames left are cancelled", job_id)
                runner.cancel()
                return
            await asyncio.sleep(REPORT_EVERY_S)
