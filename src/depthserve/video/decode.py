"""Decode the frames a request takes, in a thread of its own, never more than a window ahead of the output.

The thread holds a credit per frame it hands over; the pipeline gives a credit back once that frame's
result is written, so decoded pictures, frames at workers and results waiting for their turn together
stay within the window: a long video never sits whole in memory, whatever the speed of the workers or
the client. PyAV decodes and converts to RGB with the GIL released, so the event loop keeps running.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np

from depthserve.video.errors import VideoError, corrupt, truncated
from depthserve.video.options import VideoOptions
from depthserve.video.probe import VideoInfo

_POLL_S = 0.2  # how often a decoder waiting for a credit looks whether it was told to stop


@dataclass(frozen=True)
class Frame:
    """One frame taken: its position among the frames taken, its index in the file, its time and pixels."""

    position: int
    source: int
    time_s: float
    rgb: np.ndarray


_END = object()


class FrameReader:
    """Decodes `info.taken` frames of a file in a thread, handing them to the event loop under `window` credits."""

    def __init__(self, path: Path, info: VideoInfo, options: VideoOptions, window: int) -> None:
        self._path = path
        self._info = info
        self._options = options
        self._credits = threading.Semaphore(window)
        self._stop = threading.Event()
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="video-decode", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """A frame has left the pipeline (written, or dropped): the decoder may hand over one more."""
        self._credits.release()

    async def frames(self) -> AsyncGenerator[Frame, None]:
        """The frames taken, in order; raises VideoError if the data is corrupt or ends early."""
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, Frame)
            yield item

    async def close(self) -> None:
        """Stop decoding and wait for the thread to end (it closes the file)."""
        self._stop.set()
        self._credits.release()  # a decoder waiting for a credit wakes and sees the stop
        await asyncio.to_thread(self._thread.join)

    def _hand_over(self, item: object) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _wait_credit(self) -> bool:
        while not self._stop.is_set():
            if self._credits.acquire(timeout=_POLL_S):
                return not self._stop.is_set()
        return False

    def _run(self) -> None:
        try:
            self._decode()
        except VideoError as error:
            self._hand_over(error)
        except av.error.FFmpegError as exc:
            self._hand_over(corrupt(f"video data is corrupt: {exc.strerror or type(exc).__name__}"))
        except Exception as exc:  # noqa: BLE001 - whatever FFmpeg or numpy raise ends this video, not the gateway
            self._hand_over(corrupt(f"video could not be decoded: {type(exc).__name__}: {exc}"))
        else:
            self._hand_over(_END)

    def _decode(self) -> None:
        info, stride = self._info, self._options.stride
        position = 0
        with av.open(str(self._path), metadata_errors="ignore") as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"  # FFmpeg's own frame threads: decoding keeps up with several workers
            for source, frame in enumerate(container.decode(stream)):
                if source % stride:
                    continue
                if not self._wait_credit():
                    return
                rgb = frame.to_ndarray(format="rgb24")
                if rgb.shape[:2] != (info.height, info.width):
                    raise corrupt(
                        f"frame {source} is {rgb.shape[1]}x{rgb.shape[0]}, the stream {info.width}x{info.height}"
                    )
                time_s = float(frame.time) if frame.time is not None else source / (info.fps or 1.0)
                self._hand_over(Frame(position, source, time_s, rgb))
                position += 1
                if position == info.taken:
                    return
        raise truncated(f"video decoded to {position} of the {info.taken} frames its packets promised")
