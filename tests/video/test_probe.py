"""The probe refuses, before any frame is sent, what cannot be served whole: with the status a client gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from depthserve.testing.clips import make_clip
from depthserve.video.errors import VideoError
from depthserve.video.options import VideoLimits, VideoOptions
from depthserve.video.probe import frames_taken, probe


def refused(path: Path, options: VideoOptions | None = None, limits: VideoLimits | None = None) -> VideoError:
    with pytest.raises(VideoError) as caught:
        probe(path, options or VideoOptions(), limits or VideoLimits())
    return caught.value


@pytest.mark.parametrize(("suffix", "codec", "name"), [("mp4", "libx264", "h264"), ("webm", "libvpx-vp9", "vp9")])
def test_counts_frames_and_reads_size_rate_and_duration(tmp_path: Path, suffix: str, codec: str, name: str) -> None:
    info = probe(make_clip(tmp_path / f"c.{suffix}", 25, codec=codec), VideoOptions(), VideoLimits())
    assert (info.codec, info.width, info.height, info.frames, info.taken) == (name, 64, 48, 25, 25)
    assert info.fps == pytest.approx(10.0)
    assert info.duration_s == pytest.approx(2.5, abs=0.11)


def test_stride_and_max_frames_set_the_frames_taken() -> None:
    assert frames_taken(25, VideoOptions(stride=3)) == 9  # 0, 3, ..., 24
    assert frames_taken(25, VideoOptions(stride=3, max_frames=4)) == 4


def test_truncated_files_are_400_before_any_frame(tmp_path: Path) -> None:
    for name, faststart in (("index_last.mp4", False), ("index_first.mp4", True), ("cut.webm", False)):
        path = make_clip(
            tmp_path / name, 30, codec="libvpx-vp9" if name.endswith("webm") else "libx264", faststart=faststart
        )
        path.write_bytes(path.read_bytes()[: path.stat().st_size * 6 // 10])
        error = refused(path)
        assert error.status == 400 and error.reason in ("truncated_video", "corrupt_video"), (name, error.message)


def test_garbage_is_400_and_an_unsupported_codec_415(tmp_path: Path) -> None:
    garbage = tmp_path / "junk.mp4"
    garbage.write_bytes(b"\x00\x01not a video" * 100)
    assert refused(garbage).status == 400
    error = refused(make_clip(tmp_path / "lossless.mkv", 5, codec="ffv1"))
    assert (error.status, error.reason) == (415, "unsupported_codec")
    assert "ffv1" in error.message


def test_limits_on_frames_pixels_and_seconds_are_413(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "c.mp4", 30)
    assert refused(clip, limits=VideoLimits(max_frames=20)).reason == "too_many_frames"
    assert probe(clip, VideoOptions(stride=2), VideoLimits(max_frames=20)).taken == 15  # a stride brings it in
    assert refused(clip, limits=VideoLimits(max_frame_pixels=64 * 48 - 1)).reason == "too_many_pixels"
    error = refused(clip, limits=VideoLimits(max_seconds=2.0))
    assert (error.status, error.reason) == (413, "too_long")
