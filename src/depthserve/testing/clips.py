"""Real video clips made with PyAV for tests and benchmarks: moving, seeded pictures in a chosen codec."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np

CONTAINERS = {"mp4": "mp4", "mov": "mov", "webm": "webm", "mkv": "matroska"}


def clip_frame(index: int, height: int, width: int) -> np.ndarray:
    """Frame `index` of a clip: a gradient with a square moving across it, so frames differ and compress."""
    ys = np.linspace(0, 255, height, dtype=np.float32)[:, None]
    xs = np.linspace(0, 255, width, dtype=np.float32)[None, :]
    frame = np.empty((height, width, 3), dtype=np.uint8)
    frame[..., 0] = ys.astype(np.uint8)
    frame[..., 1] = xs.astype(np.uint8)
    frame[..., 2] = ((ys + xs) / 2 + index * 7) % 256
    side = max(2, min(height, width) // 4)
    left = (index * 5) % max(1, width - side)
    top = (index * 3) % max(1, height - side)
    frame[top : top + side, left : left + side] = (255, 255 - (index * 11) % 256, 32)
    return frame


def make_clip(
    path: Path,
    frames: int,
    width: int = 64,
    height: int = 48,
    codec: str = "libx264",
    fps: int = 10,
    faststart: bool = False,
) -> Path:
    """Write a clip of `frames` frames to `path` (container from its suffix); `faststart` puts mp4's index first."""
    options = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", format=CONTAINERS[path.suffix.lstrip(".")], options=options) as container:
        stream = container.add_stream(codec, rate=fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p" if codec not in ("ffv1", "png") else ("rgb24" if codec == "png" else "yuv444p")
        if codec == "libx264":
            stream.options = {"preset": "ultrafast"}  # long clips are made in seconds
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(clip_frame(index, height, width), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def decoded_frames(path: Path) -> list[np.ndarray]:
    """Every frame of a clip as RGB arrays, decoded as the gateway decodes them (for reference results)."""
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
