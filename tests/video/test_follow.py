"""A client following a video reply counts its frames as they arrive, whatever the pieces it reads."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from depthserve.testing.clips import make_clip
from depthserve.testing.video_fakes import FakeModel, run
from depthserve.video.follow import FrameCounter
from depthserve.video.options import VideoOptions


@pytest.mark.parametrize(("output", "frame_bytes"), [("zip", 0), ("npz", 48 * 64 * 2)])
async def test_counts_rise_frame_by_frame_to_the_total(tmp_path: Path, output: str, frame_bytes: int) -> None:
    data = await run(make_clip(tmp_path / "c.mp4", 12), VideoOptions(output=output), FakeModel())
    counter = FrameCounter(output, frame_bytes)
    counts = [counter.feed(data[start : start + 777]) for start in range(0, len(data), 777)]
    assert counts == sorted(counts) and counts[-1] == 12 and counts[0] < 12
    assert zipfile.ZipFile(io.BytesIO(data)).testzip() is None
    assert np.asarray(counts).min() >= 0
