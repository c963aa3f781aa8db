"""One video frame's inference: the video share, low-priority admission, then the dispatcher (retries, hedging,
deadline), as any request; a frame the gateway is too busy to admit waits and asks again.

Images come first, in the gateway's admission and in the worker's queue (the frame's OIP `priority`
parameter is LOW_PRIORITY, so a worker runs images queued within `low_priority_delay_ms` before it).
A frame refused at the door or shed from the queue (503 queue_full, deadline,
pool_full) is not a failed video but a frame that must wait its turn, so it asks again after a
short pause, until its own deadline (`video_frame_timeout_s`) passes. Anything else (a frame no
worker could serve after the dispatcher's retries, bad input) fails the video.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from tritonclient.grpc import service_pb2 as pb

from depthserve.balancer.types import RequestInfo
from depthserve.gateway.dispatch.dispatcher import Dispatcher
from depthserve.gateway.edge.edge import Edge
from depthserve.gateway.edge.video_share import VideoShare
from depthserve.gateway.errors import GatewayError
from depthserve.protocol.depth_api import LOW_PRIORITY, set_priority
from depthserve.video.decode import Frame
from depthserve.video.pipeline import InferFrame

WAIT_REASONS = frozenset({"queue_full", "deadline", "pool_full", "backend_overloaded"})
MAX_PAUSE_S = 0.5  # longest pause before a refused frame asks again


def frame_infer(
    dispatcher: Dispatcher,
    edge: Edge,
    share: VideoShare,
    model: str,
    caller: str,
    headers: Mapping[str, str],
    timeout_s: float,
) -> InferFrame:
    """The InferFrame a video's pipeline calls for each frame, counted under `caller`'s video identity."""
    client = f"video:{caller}"  # its own line in the fair queue, apart from the same caller's images
    info = RequestInfo(model=model, headers=headers, client=caller)
    clock = edge.clock

    async def infer(request: pb.ModelInferRequest, frame: Frame) -> pb.ModelInferResponse:
        set_priority(request, LOW_PRIORITY)  # the worker's queue serves images first too, not only admission
        deadline = clock() + timeout_s
        pause = 0.02
        while True:
            try:
                async with share.frame(model), edge.admission.admit(model, deadline, "low", client):
                    reply, _backend = await dispatcher.infer(request, info, deadline - clock(), request.id, timeout_s)
                    return reply
            except GatewayError as error:
                left = deadline - clock()
                if error.status != 503 or error.reason not in WAIT_REASONS or left <= pause:
                    raise
            await asyncio.sleep(pause)
            pause = min(MAX_PAUSE_S, pause * 2)

    return infer
