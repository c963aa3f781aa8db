"""Frames go out at most a window at a time and come back in order, whatever order the answers arrive in."""

from __future__ import annotations

import io
import random
import zipfile
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from depthserve.testing.clips import make_clip
from depthserve.testing.samples import png_bytes
from depthserve.testing.video_fakes import FakeModel, run
from depthserve.video.errors import VideoError
from depthserve.video.options import VideoLimits, VideoOptions
from depthserve.video.pipeline import VideoJob, stream_video
from depthserve.video.probe import probe


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_clip(tmp_path_factory.mktemp("clips") / "c.mp4", 30)


async def test_npz_stack_is_in_frame_order_with_stride_and_timestamps(clip: Path) -> None:
    model = FakeModel()
    data = await run(clip, VideoOptions(stride=3, output="npz", dtype="float32"), model)
    npz = np.load(io.BytesIO(data))
    assert npz["depth"].shape == (10, 48, 64) and npz["depth"].dtype == np.float32
    np.testing.assert_array_equal(npz["depth"][:, 0, 0], 1.0 + np.arange(0, 30, 3))
    np.testing.assert_array_equal(npz["frames"], np.arange(0, 30, 3))
    np.testing.assert_allclose(npz["timestamps"], np.arange(0, 30, 3) / 10.0)
    assert model.calls == 10 and model.most <= 4


async def test_zip_holds_one_png_per_frame_in_order_and_a_timeline(clip: Path) -> None:
    data = await run(clip, VideoOptions(max_frames=12), FakeModel(seed=3), window=3)
    archive = zipfile.ZipFile(io.BytesIO(data))
    names = archive.namelist()
    assert names == [f"depth_{i:06d}.png" for i in range(12)] + ["frames.csv"]
    lines = archive.read("frames.csv").decode().splitlines()
    assert lines[0] == "position,frame,time_s" and lines[6].startswith("5,5,0.5")
    for index in (0, 7, 11):
        assert np.asarray(Image.open(io.BytesIO(archive.read(names[index]))))[0, 0] == 1000 * (1 + index)


async def test_mp4_preview_plays_with_one_frame_per_frame_taken(clip: Path) -> None:
    data = await run(clip, VideoOptions(stride=2, output="mp4"), FakeModel())
    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(video=0))
    assert len(frames) == 15 and (frames[0].width, frames[0].height) == (64, 48)


async def test_a_frame_that_fails_fails_the_video_and_cancels_the_rest(clip: Path) -> None:
    model = FakeModel(fail_at=5)
    with pytest.raises(RuntimeError):
        await run(clip, VideoOptions(), model, window=8)
    assert model.running == 0 and model.calls < 30


async def test_closing_the_stream_early_cancels_frames_in_flight(clip: Path) -> None:
    model = FakeModel()
    info = probe(clip, VideoOptions(), VideoLimits())
    pieces = stream_video(VideoJob(clip, info, VideoOptions(), "m", "r"), model, 6)
    await anext(pieces)
    await pieces.aclose()
    assert model.running == 0 and model.calls < 30


async def test_data_that_stops_decoding_raises_after_the_frames_before_it(tmp_path: Path) -> None:
    path = make_clip(tmp_path / "c.mp4", 60, faststart=True)
    data = bytearray(path.read_bytes())
    rng = random.Random(1)
    for index in range(len(data) // 2, len(data), 7):
        data[index] = rng.randrange(256)
    path.write_bytes(bytes(data))
    info = probe(path, VideoOptions(), VideoLimits())  # every packet is there: only decoding can tell
    got = []
    with pytest.raises(VideoError) as caught:
        async for piece in stream_video(VideoJob(path, info, VideoOptions(), "m", "r"), FakeModel(), 4):
            got.append(piece)
    assert caught.value.status == 400 and 0 < len(got) < 60


async def test_raw_depth_frames_from_a_zip_go_with_their_frames(clip: Path, tmp_path: Path) -> None:
    depth_zip = tmp_path / "depth.zip"
    with zipfile.ZipFile(depth_zip, "w") as archive:
        for index in range(30):
            archive.writestr(f"{index:03d}.png", png_bytes(np.full((48, 64), 1000 + index, np.uint16)))
    model = FakeModel()
    await run(clip, VideoOptions(stride=5), model, depth=depth_zip)
    assert model.depths == [True] * 6
    with zipfile.ZipFile(tmp_path / "short.zip", "w") as archive:
        archive.writestr("000.png", png_bytes(np.zeros((48, 64), np.uint16)))
    with pytest.raises(VideoError) as caught:
        await run(clip, VideoOptions(), FakeModel(), depth=tmp_path / "short.zip")
    assert caught.value.reason == "invalid_depth"
