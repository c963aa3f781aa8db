"""Write examples/clip.mp4: 24 frames (2.4 s at 10 fps) of a moving square, 160x120, H.264, for the README."""

from __future__ import annotations

from pathlib import Path

from depthserve.testing.clips import make_clip

if __name__ == "__main__":
    print(make_clip(Path(__file__).resolve().parent / "clip.mp4", 24, 160, 120, fps=10))
