"""A stand-in for the gateway's per-frame inference, for video pipeline tests: distinct answers, random delays."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from depthserve.codec import encode_npy, encode_png16_mm
from depthserve.protocol.depth_api import build_encoded_response, parse_request
from depthserve.video.decode import Frame
from depthserve.video.options import VideoLimits, VideoOptions
from depthserve.video.pipeline import VideoJob, stream_video
from depthserve.video.probe import probe


class FakeModel:
    """Answers each frame with depth = its mean red level (distinct per frame), after a random delay."""

    def __init__(self, seed: int = 0, fail_at: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.running = 0
        self.most = 0
        self.calls = 0
        self.cancelled = 0
        self.fail_at = fail_at
        self.depths: list[bool] = []

    async def __call__(self, request: pb.ModelInferRequest, frame: Frame) -> pb.ModelInferResponse:
        inputs = parse_request(request)
        assert isinstance(inputs.image, np.ndarray)
        self.calls += 1
        self.running += 1
        self.most = max(self.most, self.running)
        self.depths.append(inputs.depth is not None)
        try:
            await asyncio.sleep(self.rng.uniform(0, 0.01))
            if frame.position == self.fail_at:
                raise RuntimeError("no worker could serve it")
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
        depth = np.full(inputs.image.shape[:2], 1.0 + frame.source, dtype=np.float32)
        if inputs.output_format == "png16":
            return build_encoded_response("m", "", encode_png16_mm(depth), "image/png")
        return build_encoded_response("m", "", encode_npy(depth), "application/x-npy")


async def run(path: Path, options: VideoOptions, model: FakeModel, window: int = 4, depth: Path | None = None) -> bytes:
    info = probe(path, options, VideoLimits())
    job = VideoJob(path, info, options, "m", "r", depth_path=depth)
    return b"".join([piece async for piece in stream_video(job, model, window)])
